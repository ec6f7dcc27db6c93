package main

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fero-go/fero/pkg/fero"
)

// User is a record of the "users" resource, as this service reads it.
// Users are stored under their id, a top-level key.
type User struct {
	Name     string `msgpack:"name"`
	Email    string `msgpack:"email"`
	Approved bool   `msgpack:"approved"`
}

// Email is one mail the service sends: a record of the outbox.
type Email struct {
	To      string `msgpack:"to"`
	Subject string `msgpack:"subject"`
	Body    string `msgpack:"body"`
}

// outboxKey is the key of the array of mail to send, in the
// "notifications" resource. A mailer would drain it; here nothing does.
const outboxKey = "outbox"

// Service is the notifications service, a sink at the end of a reactive
// chain: it watches the changes of "users" and writes the mail they call
// for into the outbox of its own resource, "notifications".
type Service struct {
	users         *fero.Resource // a client node: a copy of users, no partitions
	notifications *fero.Resource // a server node
	handled       atomic.Uint64
}

// OpenService opens the service's two nodes: a client node of "users",
// with usersOpts, and a server node of "notifications", with notesOpts.
func OpenService(ctx context.Context, usersOpts, notesOpts []fero.NodeOption) (*Service, error) {
	users, err := fero.Open(ctx, "users", append(usersOpts, fero.Client())...)
	if err != nil {
		return nil, fmt.Errorf("open users: %w", err)
	}
	notifications, err := fero.Open(ctx, "notifications", notesOpts...)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open notifications: %w", err), users.Close())
	}
	return &Service{users: users, notifications: notifications}, nil
}

// Close closes both nodes.
func (s *Service) Close() error {
	return errors.Join(s.notifications.Close(), s.users.Close())
}

// Handled counts the changes of users the service has handled: each is
// counted once the mail it called for, if any, is in the outbox.
func (s *Service) Handled() uint64 { return s.handled.Load() }

// Outbox returns the mail in the outbox.
func (s *Service) Outbox() ([]Email, error) {
	var out []Email
	if _, err := s.notifications.GetInto(outboxKey, &out); err != nil {
		return nil, fmt.Errorf("read the outbox: %w", err)
	}
	return out, nil
}

// Run sends the mail users' changes call for until ctx ends. It sees the
// changes applied from the moment its loop starts.
//
// The stream blocks rather than drop a change when the loop falls behind
// (a welcome mail must not be lost to a burst of sign-ups); that slows
// only this process's users node, which the loop never waits on.
func (s *Service) Run(ctx context.Context) error {
	changes := s.users.Changes(ctx, fero.OnOverflow(fero.Block))
	for mail := range s.mails(counted(changes, &s.handled)) {
		err := retry(ctx, func() error { return s.notifications.Push(ctx, outboxKey, mail, fero.Majority) })
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("queue mail to %s: %w", mail.To, err)
		}
	}
	if ctx.Err() == nil {
		return errors.New("the users change stream ended: the node closed")
	}
	return nil
}

// mails is the reactive chain: every case in which the service sends mail,
// in one place, each a filter and a draft.
func (s *Service) mails(changes iter.Seq[fero.Change]) iter.Seq[Email] {
	return draft(filter(changes, applied),
		when(isNewUser, welcome),
		when(isApproval, s.approvalNotice),
	)
}

// applied keeps the changes that reached this copy through the log. A
// Dropped change (undone after its owner failed) or a Restored partition
// (replaced by a snapshot) says nothing about what a user did.
func applied(c fero.Change) bool { return c.Kind == fero.Applied || c.Kind == fero.Committed }

// isNewUser: a user ADDed, at its top-level key (the original's
// d.type == 'ADD' && isFinite(d.key)).
func isNewUser(c fero.Change) bool { return c.Type == fero.Add && !strings.Contains(c.Key, ".") }

// isApproval: a user's "approved" field set.
func isApproval(c fero.Change) bool {
	_, field, ok := strings.Cut(c.Key, ".")
	return ok && field == "approved" && c.Type == fero.Update
}

// welcome drafts the mail to a new user.
func welcome(c fero.Change) (Email, bool) {
	var u User
	if err := c.Decode(&u); err != nil || u.Email == "" {
		return Email{}, false // not a user: nobody to write to
	}
	return Email{
		To:      u.Email,
		Subject: "Welcome, " + u.Name,
		Body:    "Thanks for signing up. We will write again once your account is approved.",
	}, true
}

// approvalNotice drafts the mail to a user whose account was approved.
// The change holds only the flag; the rest of the user is in this node's
// copy, which has applied the change by the time the stream yields it.
func (s *Service) approvalNotice(c fero.Change) (Email, bool) {
	var approved bool
	if err := c.Decode(&approved); err != nil || !approved {
		return Email{}, false
	}
	id, _, _ := strings.Cut(c.Key, ".")
	var u User
	if ok, err := s.users.GetInto(id, &u); err != nil || !ok || u.Email == "" {
		return Email{}, false // removed since, or not a user
	}
	return Email{To: u.Email, Subject: "Your account is approved", Body: "Welcome aboard, " + u.Name + "."}, true
}

// A rule drafts the mail one change calls for, if any.
type rule func(fero.Change) (Email, bool)

// when is the rule that drafts with d the changes keep accepts.
func when(keep func(fero.Change) bool, d rule) rule {
	return func(c fero.Change) (Email, bool) {
		if !keep(c) {
			return Email{}, false
		}
		return d(c)
	}
}

// draft yields, for each change in turn, the mail of every rule that
// drafts one.
func draft(changes iter.Seq[fero.Change], rules ...rule) iter.Seq[Email] {
	return func(yield func(Email) bool) {
		for c := range changes {
			for _, r := range rules {
				if m, ok := r(c); ok && !yield(m) {
					return
				}
			}
		}
	}
}

// filter yields the elements of seq that keep accepts.
func filter[T any](seq iter.Seq[T], keep func(T) bool) iter.Seq[T] {
	return func(yield func(T) bool) {
		for v := range seq {
			if keep(v) && !yield(v) {
				return
			}
		}
	}
}

// counted yields seq and counts its elements in n, each once the rest of
// the chain is done with it: yield returns only after the loop body that
// ranges over the chain has run for everything the element produced.
func counted[T any](seq iter.Seq[T], n *atomic.Uint64) iter.Seq[T] {
	return func(yield func(T) bool) {
		for v := range seq {
			more := yield(v)
			n.Add(1)
			if !more {
				return
			}
		}
	}
}

// retry runs write until it succeeds, fails for a reason that is not
// transient (see retryable), or ctx ends. A node answers Unavailable while
// its cluster settles: an owner that just gained a partition syncs it
// first.
func retry(ctx context.Context, write func() error) error {
	for {
		err := write()
		if err == nil || !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// retryable reports whether err says "not now" (CodeUnavailable): an
// owner syncing after a membership change, or no owner yet.
func retryable(err error) bool { return fero.CodeOf(err) == fero.CodeUnavailable }
