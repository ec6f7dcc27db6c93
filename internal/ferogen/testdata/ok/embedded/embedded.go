// Package embedded covers key fields promoted from embedded structs: by
// value and through a pointer, from this package and another, two levels
// down, and through an unexported struct.
package embedded

import (
	"context"

	"github.com/fero-go/fero/internal/ferogen/testdata/ok/embedded/base"
)

//fero:resource docs
type Docs interface {
	Read(ctx context.Context, req *ReadRequest) (*Doc, error)
	Write(ctx context.Context, req *WriteRequest) error
	Move(ctx context.Context, req *MoveRequest) error
	Share(ctx context.Context, req *ShareRequest) error
}

// DocID is a key: a named string type.
type DocID string

type Target struct {
	Doc DocID `msgpack:"doc" fero:"key"`
}

// ReadRequest embeds Target by value: its key is ReadRequest.Doc.
type ReadRequest struct {
	Target
	Version int `msgpack:"version"`
}

type Doc struct {
	Body string `msgpack:"body"`
}

// WriteRequest embeds a pointer to another package's struct: the client
// refuses a request whose Ref is nil.
type WriteRequest struct {
	*base.Ref
	Body string `msgpack:"body"`
}

// MoveRequest's key is two levels down, through a pointer: MoveRequest.Ref.
type MoveRequest struct {
	Move
	To string `msgpack:"to"`
}

type Move struct {
	*base.Ref
	Reason string `msgpack:"reason"`
}

// ShareRequest embeds an unexported struct by value: its key field is
// exported, and promoted.
type ShareRequest struct {
	target
	With string `msgpack:"with"`
}

type target struct {
	Name string `msgpack:"name" fero:"key"`
}
