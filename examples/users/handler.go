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

	"github.com/fero-go/fero/pkg/fero"
)

// The verbs the users service answers, besides the built-in UPDATE and
// REMOVE it passes on to fero.
const (
	VerbRegister = "REGISTER"
	VerbLogin    = "LOGIN"
	VerbLogout   = "LOGOUT"
)

// The service's own codes, HTTP-like as the original's [status, message]
// replies. The conditions fero's codes already name use those.
const (
	CodeConflict         fero.Code = 409 // the email is already registered
	CodeMethodNotAllowed fero.Code = 405 // a verb the service does not answer
)

// User is the record stored under a user's key.
//
// Every node of the resource, clients included, holds a copy of every
// record, so the salt and hash are readable wherever the resource is
// open: keep "users" inside the service's trust boundary.
type User struct {
	Email    string             `msgpack:"email"`
	Name     string             `msgpack:"name"`
	Created  time.Time          `msgpack:"created"`
	Salt     []byte             `msgpack:"salt"`
	Hash     []byte             `msgpack:"hash"`
	Sessions map[string]Session `msgpack:"sessions,omitempty"`
	// Registration is the request ID of the REGISTER that created it.
	Registration string `msgpack:"registration"`
}

// Session is one login, stored under the user at "<key>.sessions.<token>".
type Session struct {
	Created time.Time `msgpack:"created"`
	Expires time.Time `msgpack:"expires"`
	// Login is the request ID of the LOGIN that opened it.
	Login string `msgpack:"login,omitempty"`
}

// NewRequestID returns a new random request ID. REGISTER and LOGIN carry
// one, so that the service can answer a retry of a request as it answered
// the first attempt: a caller picks a new ID for each request and keeps it
// across retries. LOGOUT, UPDATE and REMOVE are idempotent as they are.
//
// Retries need this because a Call that fails with CodeUnavailable may
// have run: when the connection to the owner breaks after the request was
// sent, the caller cannot know whether the handler ran.
func NewRequestID() string { return rand.Text() }

// RegisterRequest is REGISTER's payload; its key is UserKey(Email).
type RegisterRequest struct {
	Request  string `msgpack:"request"` // see NewRequestID
	Email    string `msgpack:"email"`
	Name     string `msgpack:"name"`
	Password string `msgpack:"password"`
}

// RegisterReply is REGISTER's reply.
type RegisterReply struct {
	Email   string    `msgpack:"email"`
	Created time.Time `msgpack:"created"`
}

// LoginRequest is LOGIN's payload; its key is the user's.
type LoginRequest struct {
	Request  string `msgpack:"request"` // see NewRequestID
	Password string `msgpack:"password"`
}

// LoginReply is LOGIN's reply: the new session's token.
type LoginReply struct {
	Token   string    `msgpack:"token"`
	Expires time.Time `msgpack:"expires"`
}

// LogoutRequest is LOGOUT's payload; its key is the user's. LOGOUT replies
// nothing, and ending a session that is not there succeeds: it may be a
// retry of a LOGOUT that ran.
type LogoutRequest struct {
	Token string `msgpack:"token"`
}

// UserKey returns the top-level key a user is stored under: the email,
// trimmed and lower-cased, with '%' and '.' percent-encoded.
//
// Keys are dot-separated paths, and an email has dots: stored as it is,
// "ann@example.com" would be the map "ann@example" with a field "com",
// and the user's partition would be chosen by "ann@example" alone. The
// encoding keeps the key readable ("ann@example%2Ecom"), one-to-one (so
// two emails never share a key) and free of dots. Hex-encoding would do
// too, at the cost of readability.
func UserKey(email string) string {
	return keyEscaper.Replace(strings.ToLower(strings.TrimSpace(email)))
}

var keyEscaper = strings.NewReplacer("%", "%25", ".", "%2E")

// Service is the users service's logic: one method per verb, each given
// the resource to read and write and the request's key. Handle adapts it
// to fero's Handler; the methods take typed requests and return typed
// replies, so a generated dispatcher can call them as they are.
type Service struct {
	sessionTTL time.Duration
	now        func() time.Time
}

// NewService returns the users service; the sessions LOGIN opens last
// sessionTTL.
func NewService(sessionTTL time.Duration) *Service {
	return &Service{sessionTTL: sessionTTL, now: time.Now}
}

// Handle answers a request sent to a partition this node owns: give it to
// fero.WithHandler on every server node of "users".
func (s *Service) Handle(ctx context.Context, req *fero.Request) (any, error) {
	r := req.Resource()
	switch req.Verb {
	case VerbRegister, VerbLogin, VerbLogout:
		if req.Key == "" || strings.Contains(req.Key, ".") {
			return nil, fero.Errorf(fero.CodeInvalidArgument, "%s needs a user's key (see UserKey), not %q", req.Verb, req.Key)
		}
	}
	switch req.Verb {
	case VerbRegister:
		var in RegisterRequest
		if err := req.Decode(&in); err != nil {
			return nil, err
		}
		return s.Register(ctx, r, req.Key, in)
	case VerbLogin:
		var in LoginRequest
		if err := req.Decode(&in); err != nil {
			return nil, err
		}
		return s.Login(ctx, r, req.Key, in)
	case VerbLogout:
		var in LogoutRequest
		if err := req.Decode(&in); err != nil {
			return nil, err
		}
		return nil, s.Logout(ctx, r, req.Key, in)
	case fero.VerbUpdate:
		if err := s.checkUpdate(r, req.Key); err != nil {
			return nil, err
		}
		return req.Next(ctx)
	case fero.VerbRemove:
		return req.Next(ctx)
	}
	// ADD would store a user without a hashed password (REGISTER does
	// that), and reads are local: every node holds a copy.
	return nil, fero.Errorf(CodeMethodNotAllowed, "method %s not allowed", req.Verb)
}

// Register creates the user at key, once: a second registration of the
// same email fails with CodeConflict, unless it is a retry of the first.
func (s *Service) Register(ctx context.Context, r *fero.Resource, key string, in RegisterRequest) (RegisterReply, error) {
	addr, err := mail.ParseAddress(in.Email)
	if err != nil || addr.Address != in.Email {
		return RegisterReply{}, fero.Errorf(fero.CodeInvalidArgument, "%q is not an email address", in.Email)
	}
	if key != UserKey(in.Email) {
		return RegisterReply{}, fero.Errorf(fero.CodeInvalidArgument, "register %s under key %q, not %q", in.Email, UserKey(in.Email), key)
	}
	if len(in.Password) < 8 {
		return RegisterReply{}, fero.Errorf(fero.CodeInvalidArgument, "the password needs at least 8 characters")
	}
	u := User{Email: in.Email, Name: in.Name, Created: s.now().UTC(), Salt: make([]byte, 16), Registration: in.Request}
	_, _ = rand.Read(u.Salt) // crypto/rand.Read never fails
	u.Hash = hashPassword(u.Salt, in.Password)
	// Add is a create-once, decided by the key's owner: of two concurrent
	// registrations of one email, exactly one succeeds.
	err = r.Add(ctx, key, u, fero.Majority)
	if fero.CodeOf(err) == fero.CodeFailedPrecondition {
		// The key's owner committed the user it has, so its copy (this
		// one) holds it.
		var have User
		if ok, gerr := r.GetInto(key, &have); gerr != nil || !ok || in.Request == "" || have.Registration != in.Request {
			return RegisterReply{}, fero.Errorf(CodeConflict, "%s is already registered", in.Email)
		}
		u, err = have, nil // this request's own earlier attempt
	}
	if err != nil {
		return RegisterReply{}, fmt.Errorf("register %s: %w", in.Email, err)
	}
	return RegisterReply{Email: u.Email, Created: u.Created}, nil
}

// Login checks the password of the user at key and opens a session.
// A wrong password and an unknown user get the same answer, so that LOGIN
// does not tell who is registered.
func (s *Service) Login(ctx context.Context, r *fero.Resource, key string, in LoginRequest) (LoginReply, error) {
	var u User
	ok, err := r.GetInto(key, &u)
	if err != nil {
		return LoginReply{}, fmt.Errorf("login: read user %q: %w", key, err)
	}
	// Compare even for an unknown user, so both cases take as long.
	want := u.Hash
	if !ok {
		want = make([]byte, sha256.Size)
	}
	if subtle.ConstantTimeCompare(hashPassword(u.Salt, in.Password), want) != 1 || !ok {
		return LoginReply{}, fero.Errorf(fero.CodePermissionDenied, "wrong email or password")
	}
	for token, sess := range u.Sessions {
		if in.Request != "" && sess.Login == in.Request {
			return LoginReply{Token: token, Expires: sess.Expires}, nil // a retry
		}
	}
	now := s.now().UTC()
	token := rand.Text() // base32: no '.', so it is one path segment
	sess := Session{Created: now, Expires: now.Add(s.sessionTTL), Login: in.Request}
	// A path of its own per session: concurrent logins of one user write
	// different keys and never overwrite each other.
	if err := r.Update(ctx, sessionPath(key, token), sess, fero.Majority); err != nil {
		return LoginReply{}, fmt.Errorf("login %s: store session: %w", u.Email, err)
	}
	return LoginReply{Token: token, Expires: sess.Expires}, nil
}

// Logout ends the session with the given token of the user at key.
func (s *Service) Logout(ctx context.Context, r *fero.Resource, key string, in LogoutRequest) error {
	if in.Token == "" || strings.Contains(in.Token, ".") {
		return fero.Errorf(fero.CodeInvalidArgument, "bad session token %q", in.Token)
	}
	if err := r.Remove(ctx, sessionPath(key, in.Token), fero.Majority); err != nil {
		return fmt.Errorf("logout: remove session: %w", err)
	}
	return nil
}

// checkUpdate lets an UPDATE through only for a profile field of an
// existing user, such as "<key>.name": the credentials, the sessions and
// the email the key derives from belong to the verbs above.
func (s *Service) checkUpdate(r *fero.Resource, path string) error {
	key, field, _ := strings.Cut(path, ".")
	field, _, _ = strings.Cut(field, ".")
	switch field {
	case "":
		return fero.Errorf(fero.CodePermissionDenied, "update a user's fields one by one, not the whole user")
	case "email", "salt", "hash", "sessions", "created", "registration":
		return fero.Errorf(fero.CodePermissionDenied, "%s is not a field UPDATE may change", field)
	}
	if _, ok := r.Get(key); !ok {
		return fero.Errorf(fero.CodeNotFound, "no user %q", key)
	}
	return nil
}

func sessionPath(key, token string) string { return key + ".sessions." + token }

// hashPassword hashes a password with its salt. SHA-256 keeps the example
// within the standard library; it is far too fast for passwords, and a
// real service would use bcrypt or argon2id (golang.org/x/crypto).
func hashPassword(salt []byte, password string) []byte {
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(password))
	return h.Sum(nil)
}
