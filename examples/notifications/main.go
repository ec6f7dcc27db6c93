// Command notifications is the original fero's notifications service: a
// service at the end of a reactive chain that turns another service's
// changes into side effects. It opens "users" as a client node, so it
// holds a copy of every user and sees every change, and its own resource
// "notifications" as a server. It ranges over the users' changes, and
// for each new user, and each user whose "approved" field is set, it
// queues an email in the outbox array of "notifications" (no mail is
// really sent). The chain is in service.go; this file runs it.
//
// The demo runs, in this process and joined by real gossip on loopback,
// one server node of "users" and the notifications service. It adds
// three users, approves two, makes two changes that call for no mail,
// and prints the outbox once it holds the five mails they call for.
//
//	go run ./examples/notifications
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
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
		fmt.Fprintln(os.Stderr, "notifications:", err)
		os.Exit(1)
	}
}

// local configures a node for one machine: loopback gossip timings, no
// multicast discovery.
func local(id string, more ...fero.NodeOption) []fero.NodeOption {
	return append([]fero.NodeOption{fero.WithID(id), fero.WithPreset(fero.PresetLocal), fero.WithoutMulticast()}, more...)
}

// expected is the mail the demo's changes call for, in no particular
// order: the users live in different partitions, whose changes reach the
// service independently. One user's mail comes in the order of its
// changes.
var expected = []Email{
	{To: "ann@example.com", Subject: "Welcome, Ann", Body: "Thanks for signing up. We will write again once your account is approved."},
	{To: "bob@example.com", Subject: "Welcome, Bob", Body: "Thanks for signing up. We will write again once your account is approved."},
	{To: "cy@example.com", Subject: "Welcome, Cy", Body: "Thanks for signing up. We will write again once your account is approved."},
	{To: "ann@example.com", Subject: "Your account is approved", Body: "Welcome aboard, Ann."},
	{To: "cy@example.com", Subject: "Your account is approved", Body: "Welcome aboard, Cy."},
}

// runDemo runs a users server and the notifications service, writes
// users, and returns the outbox once it holds the expected mail. It
// prints a transcript to w.
func runDemo(ctx context.Context, w io.Writer) (outbox []Email, err error) {
	users, err := fero.Open(ctx, "users", local("users-1")...)
	if err != nil {
		return nil, fmt.Errorf("open users: %w", err)
	}
	defer func() { err = errors.Join(err, users.Close()) }()
	svc, err := OpenService(ctx,
		local("notifications-users", fero.WithSeeds(users.GossipAddr())),
		local("notifications-1"))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, svc.Close()) }()
	if err := svc.users.WaitServers(ctx, 1); err != nil {
		return nil, fmt.Errorf("the service's users node: %w", err)
	}
	if err := svc.notifications.WaitServers(ctx, 1); err != nil {
		return nil, fmt.Errorf("the notifications node: %w", err)
	}
	fmt.Fprintf(w, "users server at %s; the notifications service joined it as a client\n", users.GossipAddr())

	runCtx, stopRun := context.WithCancel(ctx)
	var runErr error
	running := make(chan struct{})
	go func() {
		defer close(running)
		runErr = svc.Run(runCtx)
	}()
	defer func() {
		stopRun()
		<-running
		if runErr != nil {
			err = errors.Join(err, fmt.Errorf("the service: %w", runErr))
		}
	}()

	// The service's stream subscribes when its loop starts, in the
	// goroutine above. Until it has handled a change, a user written now
	// might come before it listens and get no mail: write a probe until
	// it has seen one. A probe is an UPDATE, which calls for no mail.
	for i := 0; svc.Handled() == 0; i++ {
		if err := retry(ctx, func() error { return users.Update(ctx, "probe", i, fero.Majority) }); err != nil {
			return nil, fmt.Errorf("probe the service: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the service to listen: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := retry(ctx, func() error { return users.Remove(ctx, "probe", fero.Majority) }); err != nil {
		return nil, fmt.Errorf("remove the probe: %w", err)
	}
	fmt.Fprintln(w, "the service is listening to the users' changes")

	for _, step := range []struct {
		what  string
		write func() error
	}{
		{"ADD 1: Ann", func() error { return users.Add(ctx, "1", User{Name: "Ann", Email: "ann@example.com"}, fero.Majority) }},
		{"ADD 2: Bob", func() error { return users.Add(ctx, "2", User{Name: "Bob", Email: "bob@example.com"}, fero.Majority) }},
		{"ADD 3: Cy", func() error { return users.Add(ctx, "3", User{Name: "Cy", Email: "cy@example.com"}, fero.Majority) }},
		{"UPDATE 1.approved = true", func() error { return users.Update(ctx, "1.approved", true, fero.Majority) }},
		{"UPDATE 2.name = Robert (no mail)", func() error { return users.Update(ctx, "2.name", "Robert", fero.Majority) }},
		{"UPDATE 3.approved = true", func() error { return users.Update(ctx, "3.approved", true, fero.Majority) }},
		{"UPDATE 2.approved = false (no mail)", func() error { return users.Update(ctx, "2.approved", false, fero.Majority) }},
	} {
		if err := retry(ctx, step.write); err != nil {
			return nil, fmt.Errorf("users %s: %w", step.what, err)
		}
		fmt.Fprintf(w, "  users ← %s\n", step.what)
	}

	outbox, err = waitOutbox(ctx, svc, running)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "the outbox holds %d mails:\n", len(outbox))
	for _, m := range outbox {
		fmt.Fprintf(w, "  to %-16s %q\n", m.To, m.Subject)
	}
	return outbox, nil
}

// waitOutbox waits until the outbox holds the expected mail, or the
// service stops (running is closed), or ctx ends.
func waitOutbox(ctx context.Context, svc *Service, running <-chan struct{}) ([]Email, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	var outbox []Email
	for {
		var err error
		if outbox, err = svc.Outbox(); err != nil {
			return nil, err
		}
		if sameMail(outbox, expected) {
			return outbox, nil
		}
		select {
		case <-running:
			return nil, errors.New("the service stopped before the outbox held the expected mail")
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %d mails in the outbox, have %d: %w", len(expected), len(outbox), ctx.Err())
		case <-t.C:
		}
	}
}

// sameMail reports whether a and b hold the same mail, in any order.
func sameMail(a, b []Email) bool {
	count := make(map[Email]int, len(a))
	for _, m := range a {
		count[m]++
	}
	for _, m := range b {
		count[m]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return len(a) == len(b)
}
