// Command users is the original fero's users service: a resource that
// answers verbs of its own. REGISTER creates a user once, LOGIN checks a
// password and opens a session, LOGOUT ends it; UPDATE and REMOVE fall
// through to fero's built-in handling, and any other verb is answered
// 405. The logic is in handler.go; this file runs it.
//
// A request goes to the owner of its key's partition, whose handler
// answers it, from whichever node sends it. The demo runs three server
// nodes with the handler and one client node in this process, joined by
// real gossip on loopback. The client calls every verb, the failing cases
// included, and prints the typed replies and coded errors; it reads what
// the calls wrote from its own copy.
//
//	go run ./examples/users
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fero-go/fero/pkg/fero"
)

// demoTimeout bounds the whole demo: every wait below ends with it.
const demoTimeout = 30 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	if _, err := runDemo(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "users:", err)
		os.Exit(1)
	}
}

// outcome is what the demo's client saw.
type outcome struct {
	Registered []RegisterReply
	Login      LoginReply
	// The errors of the calls meant to fail.
	Duplicate, WrongPassword, UpdateHash, UnknownVerb error
	// What the client's copy held after LOGIN, and at the end.
	AfterLogin, AtEnd map[string]User
}

// runDemo opens the cluster, calls every verb from the client and returns
// what it saw, printing a transcript to w.
func runDemo(ctx context.Context, w io.Writer) (out *outcome, err error) {
	var nodes []*fero.Resource
	defer func() {
		for _, r := range slices.Backward(nodes) {
			if cerr := r.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("close %s: %w", r.ID(), cerr))
			}
		}
	}()
	svc := NewService(time.Hour)
	seed := ""
	for _, id := range []string{"server-1", "server-2", "server-3", "client"} {
		opts := []fero.NodeOption{fero.WithID(id), fero.WithPreset(fero.PresetLocal), fero.WithoutMulticast()}
		if id == "client" {
			opts = append(opts, fero.Client()) // a client owns no partition: it needs no handler
		} else {
			opts = append(opts, fero.WithHandler(svc.Handle))
		}
		if seed != "" {
			opts = append(opts, fero.WithSeeds(seed))
		}
		r, err := fero.Open(ctx, "users", opts...)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", id, err)
		}
		nodes = append(nodes, r)
		if seed == "" {
			seed = r.GossipAddr()
		}
	}
	for _, r := range nodes {
		if err := r.WaitServers(ctx, 3); err != nil {
			return nil, fmt.Errorf("%s: %w", r.ID(), err)
		}
	}
	fmt.Fprintf(w, "3 servers with the users handler and 1 client, joined by gossip at %s\n\n", seed)

	users := nodes[len(nodes)-1]
	d := &demo{w: w, users: users, out: &outcome{}}
	if err := d.run(ctx); err != nil {
		return nil, err
	}
	return d.out, nil
}

// demo is the client's side of the demo: the calls, in order.
type demo struct {
	w     io.Writer
	users *fero.Resource // the client node
	out   *outcome
}

const (
	ann      = "Ann@Example.com"
	bob      = "bob.smith@example.org"
	password = "correct horse"
)

func (d *demo) run(ctx context.Context) error {
	for _, u := range []RegisterRequest{
		{Request: NewRequestID(), Email: ann, Name: "Ann", Password: password},
		{Request: NewRequestID(), Email: bob, Name: "Bob", Password: "battery staple"},
	} {
		var reg RegisterReply
		if err := d.call(ctx, VerbRegister, UserKey(u.Email), u, &reg); err != nil {
			return err
		}
		d.out.Registered = append(d.out.Registered, reg)
		d.printf("REGISTER %s → registered under key %q at %s", u.Email, UserKey(u.Email), reg.Created.Format(time.TimeOnly))
	}

	d.out.Duplicate = d.fails(ctx, VerbRegister, UserKey(ann), RegisterRequest{Request: NewRequestID(), Email: ann, Name: "Ann again", Password: "something else"}, "REGISTER %s again", ann)
	d.out.WrongPassword = d.fails(ctx, VerbLogin, UserKey(ann), LoginRequest{Request: NewRequestID(), Password: "wrong password"}, "LOGIN %s with a wrong password", ann)

	var login LoginReply
	if err := d.call(ctx, VerbLogin, UserKey(ann), LoginRequest{Request: NewRequestID(), Password: password}, &login); err != nil {
		return err
	}
	d.out.Login = login
	d.printf("LOGIN %s → token %s, valid until %s", ann, login.Token, login.Expires.Format(time.TimeOnly))

	// The owner stored the session; the client's copy applies the commit a
	// moment later, and then reads it locally.
	var err error
	if d.out.AfterLogin, err = d.waitCopy(ctx, "the session", func(us map[string]User) bool {
		_, ok := us[UserKey(ann)].Sessions[login.Token]
		return ok
	}); err != nil {
		return err
	}
	d.printf("the client's own copy: %s has %d session(s)", ann, len(d.out.AfterLogin[UserKey(ann)].Sessions))

	if err := d.call(ctx, fero.VerbUpdate, UserKey(ann)+".name", "Ann Lee", nil); err != nil {
		return err
	}
	d.printf("UPDATE %s.name → ok (through to fero's built-in UPDATE)", UserKey(ann))
	d.out.UpdateHash = d.fails(ctx, fero.VerbUpdate, UserKey(ann)+".hash", []byte("forged"), "UPDATE %s.hash", UserKey(ann))
	if err := d.call(ctx, VerbLogout, UserKey(ann), LogoutRequest{Token: login.Token}, nil); err != nil {
		return err
	}
	d.printf("LOGOUT %s %s → ok", ann, login.Token)
	d.out.UnknownVerb = d.fails(ctx, "FROBNICATE", UserKey(ann), nil, "FROBNICATE %s", ann)
	if err := d.call(ctx, fero.VerbRemove, UserKey(bob), nil, nil); err != nil {
		return err
	}
	d.printf("REMOVE %s → ok (through to fero's built-in REMOVE)", bob)

	if d.out.AtEnd, err = d.waitCopy(ctx, "the last changes", func(us map[string]User) bool {
		a, ok := us[UserKey(ann)]
		return ok && len(us) == 1 && a.Name == "Ann Lee" && len(a.Sessions) == 0
	}); err != nil {
		return err
	}
	fmt.Fprintln(d.w, "\nthe client's own copy at the end:")
	for key, u := range d.out.AtEnd {
		d.printf("%s: %s <%s>, registered %s, %d session(s)", key, u.Name, u.Email, u.Created.Format(time.TimeOnly), len(u.Sessions))
	}
	return nil
}

// call sends a request from the client and decodes its reply into reply.
//
// It retries while the cluster settles (CodeUnavailable: say, an owner
// still syncing a partition it just gained). Every verb of the service is
// safe to retry (see NewRequestID), which matters: a Call can fail with
// Unavailable after its request was sent and its handler ran.
func (d *demo) call(ctx context.Context, verb, key string, payload, reply any) error {
	for {
		err := d.users.Call(ctx, verb, key, payload, reply)
		if err == nil || !retryable(err) {
			if err != nil {
				return fmt.Errorf("%s %s: %w", verb, key, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %s: %w (last error: %w)", verb, key, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// fails makes a call meant to fail, prints its coded error and returns it
// (nil if the call succeeded after all).
func (d *demo) fails(ctx context.Context, verb, key string, payload any, format string, args ...any) error {
	err := d.call(ctx, verb, key, payload, nil)
	var fe *fero.Error
	switch {
	case err == nil:
		d.printf(format+" → ok (unexpected)", args...)
	case errors.As(err, &fe):
		d.printf(format+" → error %d (%s): %s", append(args, uint32(fe.Code()), fe.Code(), fe.Message())...)
	default:
		d.printf(format+" → %v", append(args, err)...)
	}
	return err
}

// waitCopy waits until the client's copy satisfies cond and returns it.
func (d *demo) waitCopy(ctx context.Context, what string, cond func(map[string]User) bool) (map[string]User, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		us := fero.Typed[User](d.users).Snapshot()
		if cond(us) {
			return us, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the client's copy to show %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

func (d *demo) printf(format string, args ...any) {
	fmt.Fprintf(d.w, "  %s\n", strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// retryable reports whether err says "not now" (CodeUnavailable): an
// owner syncing after a membership change, or no owner yet.
func retryable(err error) bool { return fero.CodeOf(err) == fero.CodeUnavailable }
