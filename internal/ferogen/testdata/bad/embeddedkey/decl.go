package embeddedkey

import "context"

//fero:resource things
type Things interface {
	Shadowed(ctx context.Context, req *Shadowed) error
	Ambiguous(ctx context.Context, req *Ambiguous) error
	Hidden(ctx context.Context, req *Hidden) error
	Skipped(ctx context.Context, req *Skipped) error
	TwoKeys(ctx context.Context, req *TwoKeys) error
	Unknown(ctx context.Context, req *Unknown) error
	Through(ctx context.Context, req *Through) error
}

type Ref struct {
	ID string `msgpack:"id" fero:"key"`
}

type Other struct {
	ID string `msgpack:"other_id"`
}

// Shadowed.ID is its own field, not Ref's.
type Shadowed struct {
	Ref
	ID string `msgpack:"my_id"`
}

// Ambiguous.ID could be Ref's or Other's.
type Ambiguous struct {
	Ref
	Other
}

type hidden struct {
	ID string `msgpack:"id" fero:"key"`
}

// Hidden embeds a pointer the generated code cannot check for nil.
type Hidden struct {
	*hidden
}

// Skipped's Ref is not encoded.
type Skipped struct {
	Ref `msgpack:"-"`
}

type Name struct {
	Name string `msgpack:"name" fero:"key"`
}

// TwoKeys has a key from each of its embedded structs.
type TwoKeys struct {
	Ref
	Name
}

type Tagged struct {
	ID string `msgpack:"id" fero:"primary"`
}

// Unknown has a key, and an unknown tag in an embedded struct.
type Unknown struct {
	Tagged
	Key string `msgpack:"key" fero:"key"`
}

// Through.ID is its Inner's Ref's, but Through.Ref, which the generated
// code would check for nil, is its own field.
type Through struct {
	Inner
	Ref string `msgpack:"ref"`
}

type Inner struct {
	*Ref
}
