// ferogen wrote this file once, as a start: it is yours to edit, and
// ferogen never writes it again. When the declarations gain a verb,
// ferogen lists the methods this file's types lack.

package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/mail"
	"strings"
	"time"

	"github.com/fero-go/fero/examples/typedusers/users"
	"github.com/fero-go/fero/examples/typedusers/users/usersfero"
	"github.com/fero-go/fero/pkg/fero"
)

// UsersService implements users.Users.
// Mount it on every server node of the resource:
//
//	fero.Open(ctx, usersfero.UsersResourceName, usersfero.RegisterUsers(&UsersService{}))
//
// Each method runs on the node that owns its request's key.
// usersfero.RequestFromContext(ctx) returns the request, whose
// Resource() is the resource to read and write.
type UsersService struct {
	// Verbs declared later answer CodeUnimplemented until implemented:
	// ResetPassword does, and ferogen says so when it runs.
	usersfero.UnimplementedUsers
	// SessionTTL is how long the sessions LOGIN opens last.
	SessionTTL time.Duration
}

var _ users.Users = (*UsersService)(nil)

// Register creates the user at req.User, once: of two registrations of
// one email, the owner of its key commits exactly one (Add is a
// create-once), and the other fails with users.CodeConflict.
func (s *UsersService) Register(ctx context.Context, req *users.RegisterRequest) (*users.RegisterReply, error) {
	r, err := resource(ctx, req.User)
	if err != nil {
		return nil, err
	}
	if addr, err := mail.ParseAddress(req.Email); err != nil || addr.Address != req.Email {
		return nil, fero.Errorf(fero.CodeInvalidArgument, "%q is not an email address", req.Email)
	}
	if req.User != users.KeyOf(req.Email) {
		return nil, fero.Errorf(fero.CodeInvalidArgument, "register %s under key %q, not %q", req.Email, users.KeyOf(req.Email), req.User)
	}
	if len(req.Password) < 8 {
		return nil, fero.Errorf(fero.CodeInvalidArgument, "the password needs at least 8 characters")
	}
	u := users.User{Email: req.Email, Name: req.Name, Created: time.Now().UTC(), Salt: make([]byte, 16)}
	_, _ = rand.Read(u.Salt) // crypto/rand.Read never fails
	u.Hash = hashPassword(u.Salt, req.Password)
	err = r.Add(ctx, string(req.User), u, fero.Majority)
	if fero.CodeOf(err) == fero.CodeFailedPrecondition {
		return nil, fero.Errorf(users.CodeConflict, "%s is already registered", req.Email)
	}
	if err != nil {
		return nil, fmt.Errorf("register %s: %w", req.Email, err)
	}
	return &users.RegisterReply{Email: u.Email, Created: u.Created, Server: r.ID()}, nil
}

// Login checks the password of the user at req.User and opens a session
// of its own path, so that concurrent logins never overwrite each other.
func (s *UsersService) Login(ctx context.Context, req *users.LoginRequest) (*users.LoginReply, error) {
	r, err := resource(ctx, req.User)
	if err != nil {
		return nil, err
	}
	var u users.User
	ok, err := r.GetInto(string(req.User), &u)
	if err != nil {
		return nil, fmt.Errorf("login: read user %q: %w", req.User, err)
	}
	// Compare even for an unknown user, so that both cases take as long.
	want := u.Hash
	if !ok {
		want = make([]byte, sha256.Size)
	}
	if subtle.ConstantTimeCompare(hashPassword(u.Salt, req.Password), want) != 1 || !ok {
		return nil, fero.Errorf(fero.CodePermissionDenied, "wrong email or password")
	}
	now := time.Now().UTC()
	token := rand.Text() // base32: no '.', so one path segment
	sess := users.Session{Created: now, Expires: now.Add(s.SessionTTL)}
	if err := r.Update(ctx, sessionPath(req.User, token), sess, fero.Majority); err != nil {
		return nil, fmt.Errorf("login %s: store session: %w", u.Email, err)
	}
	return &users.LoginReply{Token: token, Expires: sess.Expires, Server: r.ID()}, nil
}

// Logout ends the session with req.Token.
func (s *UsersService) Logout(ctx context.Context, req *users.LogoutRequest) error {
	r, err := resource(ctx, req.User)
	if err != nil {
		return err
	}
	if req.Token == "" || strings.Contains(req.Token, ".") {
		return fero.Errorf(fero.CodeInvalidArgument, "bad session token %q", req.Token)
	}
	if err := r.Remove(ctx, sessionPath(req.User, req.Token), fero.Majority); err != nil {
		return fmt.Errorf("logout: remove session: %w", err)
	}
	return nil
}

// resource returns the resource the request being answered came to, and
// checks its key: a user's key is one path segment.
func resource(ctx context.Context, key users.UserKey) (*fero.Resource, error) {
	req, ok := usersfero.RequestFromContext(ctx)
	if !ok {
		return nil, fero.Errorf(fero.CodeFailedPrecondition, "users: UsersService answers requests mounted with usersfero.RegisterUsers")
	}
	if key == "" || strings.Contains(string(key), ".") {
		return nil, fero.Errorf(fero.CodeInvalidArgument, "%s needs a user's key (see users.KeyOf), not %q", req.Verb, key)
	}
	return req.Resource(), nil
}

func sessionPath(key users.UserKey, token string) string {
	return string(key) + ".sessions." + token
}

// hashPassword hashes a password with its salt. SHA-256 keeps the example
// within the standard library; it is far too fast for passwords, and a
// real service would use bcrypt or argon2id.
func hashPassword(salt []byte, password string) []byte {
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(password))
	return h.Sum(nil)
}
