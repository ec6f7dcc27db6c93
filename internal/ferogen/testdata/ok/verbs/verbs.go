// Package verbs covers verb names: from method names of several words,
// overridden by a directive, on methods of a grouped type declaration;
// and a key of a named string type, a request shared by two verbs.
package verbs

import "context"

type (
	// Accounts is a resource declared in a group.
	//
	//fero:resource accounts
	Accounts interface {
		// ResetPassword is RESET_PASSWORD.
		ResetPassword(ctx context.Context, req *Request) error
		// GetURL is GET_URL: only GET itself is fero's.
		GetURL(ctx context.Context, req *Request) (*URL, error)
		// HTTPProxy is HTTP_PROXY.
		HTTPProxy(ctx context.Context, req *Request) (*URL, error)
		// Delete is named by its directive.
		//
		//fero:verb accounts.delete/v2
		Delete(context.Context, *Request) error
	}

	// AccountID is a key: a named string type.
	AccountID string
)

// Request is every verb's request.
type Request struct {
	ID     AccountID `msgpack:"id" fero:"key"`
	Reason string    `msgpack:"reason,omitempty"`
	// Ignored is not encoded, so its type does not matter.
	Ignored chan int `msgpack:"-"`
	// private is not encoded either: unexported.
	//lint:ignore U1000 the case checks that ferogen skips it
	private func()
}

type URL struct {
	URL string `msgpack:"url"`
}
