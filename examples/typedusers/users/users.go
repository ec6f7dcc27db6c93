// Package users declares the users service for ferogen: the resource
// "users", its verbs, and their typed requests and replies. ferogen
// generates package usersfero from it; package main (one directory up)
// implements it.
//
// It is examples/users declared rather than hand-dispatched: REGISTER
// creates a user once, LOGIN checks a password and opens a session,
// LOGOUT ends it, and RESET is declared ahead of its implementation.
package users

//go:generate go tool ferogen --stub ../users_impl.go

import (
	"context"
	"strings"
	"time"

	"github.com/fero-go/fero/pkg/fero"
)

// Users is the users service.
//
//fero:resource users
type Users interface {
	// Register creates the user, once: registering an email again fails
	// with CodeConflict.
	Register(ctx context.Context, req *RegisterRequest) (*RegisterReply, error)
	// Login checks the password and opens a session. A wrong password
	// and an unknown user both fail with CodePermissionDenied.
	Login(ctx context.Context, req *LoginRequest) (*LoginReply, error)
	// Logout ends a session. Ending one that is not there succeeds: it
	// may be a retry.
	Logout(ctx context.Context, req *LogoutRequest) error
	// ResetPassword would mail a reset link. It is declared, and not
	// implemented yet: it answers CodeUnimplemented.
	//
	//fero:verb RESET
	ResetPassword(ctx context.Context, req *ResetPasswordRequest) error
}

// CodeConflict is REGISTER's answer for an email already registered: the
// service's own code, HTTP-like as the original's statuses.
const CodeConflict fero.Code = 409

// UserKey is the key a user is stored under, and the key that routes the
// user's requests: KeyOf(email).
type UserKey string

// KeyOf returns the key of the user with the given email: the email,
// trimmed and lower-cased, with '%' and '.' percent-encoded. Keys are
// dot-separated paths, and stored as it is, "ann@example.com" would be
// the map "ann@example" with a field "com"; the encoding keeps keys
// readable, one-to-one and free of dots.
func KeyOf(email string) UserKey {
	return UserKey(keyEscaper.Replace(strings.ToLower(strings.TrimSpace(email))))
}

var keyEscaper = strings.NewReplacer("%", "%25", ".", "%2E")

// RegisterRequest is REGISTER's request; User must be KeyOf(Email).
type RegisterRequest struct {
	User     UserKey `msgpack:"user" fero:"key"`
	Email    string  `msgpack:"email"`
	Name     string  `msgpack:"name"`
	Password string  `msgpack:"password"`
}

// RegisterReply is REGISTER's reply.
type RegisterReply struct {
	Email   string    `msgpack:"email"`
	Created time.Time `msgpack:"created"`
	// Server is the node that answered: the owner of the user's key.
	Server string `msgpack:"server"`
}

// LoginRequest is LOGIN's request.
type LoginRequest struct {
	User     UserKey `msgpack:"user" fero:"key"`
	Password string  `msgpack:"password"`
}

// LoginReply is LOGIN's reply: the new session.
type LoginReply struct {
	Token   string    `msgpack:"token"`
	Expires time.Time `msgpack:"expires"`
	// Server is the node that answered: the owner of the user's key.
	Server string `msgpack:"server"`
}

// LogoutRequest is LOGOUT's request.
type LogoutRequest struct {
	User  UserKey `msgpack:"user" fero:"key"`
	Token string  `msgpack:"token"`
}

// ResetPasswordRequest is RESET's request.
type ResetPasswordRequest struct {
	User UserKey `msgpack:"user" fero:"key"`
}

// User is the record stored under a user's key. Every node of the
// resource holds a copy of every record, salt and hash included: keep
// "users" inside the service's trust boundary.
type User struct {
	Email    string             `msgpack:"email"`
	Name     string             `msgpack:"name"`
	Created  time.Time          `msgpack:"created"`
	Salt     []byte             `msgpack:"salt"`
	Hash     []byte             `msgpack:"hash"`
	Sessions map[string]Session `msgpack:"sessions,omitempty"`
}

// Session is one login, stored under the user at "<key>.sessions.<token>".
type Session struct {
	Created time.Time `msgpack:"created"`
	Expires time.Time `msgpack:"expires"`
}
