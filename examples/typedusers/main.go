// Command typedusers is examples/users declared for ferogen: the service's
// verbs are methods of the interface users.Users, ferogen generates
// package usersfero (verb constants, RegisterUsers, a typed client,
// UnimplementedUsers) from it, and users_impl.go, the stub ferogen wrote
// once, implements it.
//
// The demo runs three server nodes with the implementation and one client
// node in this process, joined by real gossip on loopback. The client
// calls every verb through the generated client and prints the typed
// replies and coded errors, and which server answered each call: the
// owner of the user's key.
//
//	go run ./examples/typedusers
//
// To regenerate after editing users/users.go: go generate ./examples/typedusers/...
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/fero-go/fero/examples/typedusers/users"
	"github.com/fero-go/fero/examples/typedusers/users/usersfero"
	"github.com/fero-go/fero/pkg/fero"
)

// demoTimeout bounds the whole demo.
const demoTimeout = 30 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	if _, err := runDemo(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "typedusers:", err)
		os.Exit(1)
	}
}

// outcome is what the demo's client saw.
type outcome struct {
	Registered *users.RegisterReply
	Login      *users.LoginReply
	// The errors of the calls meant to fail.
	Duplicate, WrongPassword, Reset error
	// The client's copy of the user after LOGOUT.
	AtEnd users.User
}

const (
	email    = "Ann@Example.com"
	password = "correct horse"
)

// runDemo opens the cluster, calls every verb from the client node through
// the generated client, and returns what it saw, printing a transcript
// to w.
func runDemo(ctx context.Context, w io.Writer) (out *outcome, err error) {
	var nodes []*fero.Resource
	defer func() {
		for _, r := range slices.Backward(nodes) {
			if cerr := r.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("close %s: %w", r.ID(), cerr))
			}
		}
	}()
	svc := &UsersService{SessionTTL: time.Hour}
	seed := ""
	for _, id := range []string{"server-1", "server-2", "server-3", "client"} {
		opts := []fero.NodeOption{fero.WithID(id), fero.WithPreset(fero.PresetLocal), fero.WithoutMulticast()}
		if id == "client" {
			opts = append(opts, fero.Client()) // a client owns no partition: it answers nothing
		} else {
			opts = append(opts, usersfero.RegisterUsers(svc))
		}
		if seed != "" {
			opts = append(opts, fero.WithSeeds(seed))
		}
		r, err := fero.Open(ctx, usersfero.UsersResourceName, opts...)
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
	fmt.Fprintf(w, "3 servers with usersfero.RegisterUsers and 1 client, joined by gossip at %s\n\n", seed)

	client := nodes[len(nodes)-1]
	u := usersfero.NewUsersClient(client)
	key := users.KeyOf(email)
	out = &outcome{}

	if err := retry(ctx, func() (err error) {
		out.Registered, err = u.Register(ctx, &users.RegisterRequest{User: key, Email: email, Name: "Ann", Password: password})
		return err
	}); err != nil {
		return nil, fmt.Errorf("REGISTER: %w", err)
	}
	fmt.Fprintf(w, "REGISTER %s → key %q, answered by %s\n", email, key, out.Registered.Server)
	_, out.Duplicate = u.Register(ctx, &users.RegisterRequest{User: key, Email: email, Name: "Ann again", Password: "something else"})
	fmt.Fprintf(w, "REGISTER %s again → %v (code %d)\n", email, out.Duplicate, fero.CodeOf(out.Duplicate))
	_, out.WrongPassword = u.Login(ctx, &users.LoginRequest{User: key, Password: "wrong password"})
	fmt.Fprintf(w, "LOGIN with a wrong password → %v (code %d)\n", out.WrongPassword, fero.CodeOf(out.WrongPassword))

	if err := retry(ctx, func() (err error) {
		out.Login, err = u.Login(ctx, &users.LoginRequest{User: key, Password: password})
		return err
	}); err != nil {
		return nil, fmt.Errorf("LOGIN: %w", err)
	}
	fmt.Fprintf(w, "LOGIN → token %s, valid until %s, answered by %s\n", out.Login.Token, out.Login.Expires.Format(time.TimeOnly), out.Login.Server)
	if err := retry(ctx, func() error {
		return u.Logout(ctx, &users.LogoutRequest{User: key, Token: out.Login.Token})
	}); err != nil {
		return nil, fmt.Errorf("LOGOUT: %w", err)
	}
	fmt.Fprintf(w, "LOGOUT %s → ok\n", out.Login.Token)
	out.Reset = u.ResetPassword(ctx, &users.ResetPasswordRequest{User: key})
	fmt.Fprintf(w, "RESET → %v (code %d)\n", out.Reset, fero.CodeOf(out.Reset))

	// The client reads its own copy, once it applied the LOGOUT's commit.
	for {
		ok, err := client.GetInto(string(key), &out.AtEnd)
		if err != nil {
			return nil, err
		}
		if ok && len(out.AtEnd.Sessions) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the client's copy: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	fmt.Fprintf(w, "\nthe client's own copy: %s <%s>, registered %s, no session\n", out.AtEnd.Name, out.AtEnd.Email, out.AtEnd.Created.Format(time.TimeOnly))
	return out, nil
}

// retry repeats a call while the cluster settles: CodeUnavailable says
// "not now" (an owner still syncing a partition it just gained, say).
//
// A call can also fail so after its handler ran, when the connection to
// the owner broke; a retried REGISTER then answers CodeConflict.
// examples/users shows how request IDs make such retries answer as the
// first attempt did.
func retry(ctx context.Context, call func() error) error {
	for {
		err := call()
		if err == nil || fero.CodeOf(err) != fero.CodeUnavailable {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
