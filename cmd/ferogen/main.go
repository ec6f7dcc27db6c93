// Command ferogen generates typed Go code for fero resources declared as
// Go interfaces: verb constants, a handler that mounts an implementation,
// a client that sends each call to the owner of its key, and an
// Unimplemented type; and, once, a stub implementation to fill in.
//
//	//go:generate go tool ferogen
//
// Run it in (or on) the directory of the declaring package; `ferogen
// --help` explains the declaration format, and docs/ferogen.md walks from
// a declaration to a running service.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fero-go/fero/internal/ferogen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes: bad declarations and failures exit 1, bad usage 2.
const (
	exitFailure = 1
	exitUsage   = 2
)

const long = `ferogen reads the Go package in dir (default ".") and, for each interface
marked //fero:resource, generates a Go package with:

  - the resource's name and a constant per verb;
  - Register<Iface>(impl) fero.NodeOption, which mounts an implementation on the
    resource fero.Open opens, and <Iface>Handler(impl, next) fero.Handler;
    verbs the interface does not declare go to next, by default fero's
    built-in handling (ADD, UPDATE, REMOVE and GET as without a handler,
    CodeUnimplemented for any other verb);
  - New<Iface>Client(c) <Iface>, whose methods send each request to the
    owner of its key's partition (c is a *fero.Resource or a *fero.Remote);
  - Unimplemented<Iface>, which answers every verb with CodeUnimplemented;
  - RequestFromContext(ctx), the request a method is answering (its
    Resource() is the resource to read and write).

It also writes, if the file is absent, a stub implementation to fill in; it
never touches the stub again, and lists the methods the stub lacks instead.

The declaration:

	package users

	import (
		"context"
		"time"
	)

	//fero:resource users
	type Users interface {
		// Login is the verb LOGIN (the method name in upper case,
		// ResetPassword: RESET_PASSWORD).
		Login(ctx context.Context, req *LoginRequest) (*LoginReply, error)
		// A directive names the verb otherwise.
		//
		//fero:verb SIGNOUT
		Logout(ctx context.Context, req *LogoutRequest) error
		// A verb that only reads may run without its key's turn,
		// many at once for one key (fero.Concurrent).
		//
		//fero:concurrent
		Profile(ctx context.Context, req *LogoutRequest) (*LoginReply, error)
	}

	type LoginRequest struct {
		// The key field routes the request: it goes to the owner of
		// the key's partition. One field, a string or a named string.
		Email    string ` + "`msgpack:\"email\" fero:\"key\"`" + `
		Password string ` + "`msgpack:\"password\"`" + `
	}

	type LoginReply struct {
		Token   string    ` + "`msgpack:\"token\"`" + `
		Expires time.Time ` + "`msgpack:\"expires\"`" + `
	}

	type LogoutRequest struct {
		Email string ` + "`msgpack:\"email\" fero:\"key\"`" + `
		Token string ` + "`msgpack:\"token\"`" + `
	}

Each method is func(context.Context, *Request) (*Reply, error) or
func(context.Context, *Request) error, where Request and Reply are exported
named structs (of this package or an imported one) that msgpack encodes
and decodes: no interface with methods in them, but any and error. The key
field may be promoted from an embedded struct. Verbs are ASCII letters,
digits and _ . : / -, and not one of fero's own (ADD, UPDATE, REMOVE, GET);
docs/ferogen.md gives the exact rule that makes a verb of a method name.
To keep a method named Get, give the resource a verb prefix, which starts
every verb made of a method name (not those of //fero:verb):

	//fero:resource users verbprefix=USERS_

and Get is USERS_GET. Verbs are on the wire: choose it before you deploy.

With the defaults, a declaration package users in dir gets:

	dir/usersfero/users.fero.go    generated: do not edit, regenerate
	dir/usersimpl/users_impl.go    the stub: written once, yours to edit

A bad declaration is reported as file:line:col: message, one line per
problem, and ferogen exits with status 1. File names are relative to the
current directory, or absolute when go generate runs ferogen (in the
package's directory, not yours).`

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	var opt ferogen.Options
	cmd := &cobra.Command{
		Use:   "ferogen [flags] [dir]",
		Short: "Generate typed handlers and clients for fero resources declared in Go",
		Long:  long,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{fmt.Errorf("one directory at most, got %d arguments", len(args))}
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			opt.NoStub = cmd.Flags().Changed("stub") && opt.Stub == ""
			return generate(cmd.Context(), dir, opt, stderr)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.Flags().StringVar(&opt.Out, "out", ferogen.DefaultOut,
		"directory of the generated package, relative to dir; {pkg} is the declaration package's name")
	cmd.Flags().StringVar(&opt.Stub, "stub", ferogen.DefaultStub,
		`stub implementation file, relative to dir, written only if absent ("" for none)`)
	return cmd
}

// usageError marks an error in how ferogen was called.
type usageError struct{ error }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := newRoot(stdout, stderr)
	cmd.SetArgs(args)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var list ferogen.ErrorList
	var usage usageError
	switch {
	case errors.As(err, &list):
		fmt.Fprintln(stderr, relative(list))
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "ferogen: %v\n%s", err, cmd.UsageString())
		return exitUsage
	default:
		fmt.Fprintln(stderr, err)
	}
	return exitFailure
}

func generate(ctx context.Context, dir string, opt ferogen.Options, stderr io.Writer) error {
	pkgs, err := ferogen.Load(ctx, dir)
	if err != nil {
		return err
	}
	out, err := ferogen.Generate(pkgs[0], opt)
	if err != nil {
		return err
	}
	res, err := out.Write()
	if err != nil {
		return err
	}
	if out.Stub != nil && len(res.Wrote) > 0 && res.Wrote[len(res.Wrote)-1] == out.Stub.Path {
		stub := out.Stub.Path
		if dir := messageDir(); dir != "" {
			if r, err := filepath.Rel(dir, stub); err == nil && len(r) < len(stub) {
				stub = r
			}
		}
		fmt.Fprintf(stderr, "ferogen: wrote the stub %s: implement it there, ferogen will not write it again\n", stub)
	}
	if len(res.Notes) > 0 {
		fmt.Fprintln(stderr, relative(res.Notes))
	}
	return nil
}

// messageDir is the directory the file names in messages are relative
// to, where that makes them shorter: the current directory, as go vet
// prints them. go generate runs ferogen in the package's directory and
// does not say where it was run itself, so then messageDir is "", and the
// names are absolute, which hold from anywhere.
func messageDir() string {
	if os.Getenv("GOFILE") != "" && os.Getenv("GOPACKAGE") != "" {
		return ""
	}
	wd, _ := os.Getwd()
	return wd
}

func relative(l ferogen.ErrorList) ferogen.ErrorList {
	if dir := messageDir(); dir != "" {
		return l.Relative(dir)
	}
	return l
}
