package unsupported

import "context"

//fero:resource things
type Things interface {
	IntKey(ctx context.Context, req *IntKey) error
	TwoKeys(ctx context.Context, req *TwoKeys) error
	Hidden(ctx context.Context, req *Hidden) error
	Skipped(ctx context.Context, req *Skipped) error
	Payload(ctx context.Context, req *Payload) (*Reply, error)
}

type IntKey struct {
	ID int `msgpack:"id" fero:"key"`
}

type TwoKeys struct {
	A string `fero:"key"`
	B string `fero:"key"`
}

type Hidden struct {
	id string `fero:"key"`
}

type Skipped struct {
	ID string `msgpack:"-" fero:"key"`
}

type Payload struct {
	ID    string               `fero:"key"`
	Done  chan struct{}        `msgpack:"done"`
	Deep  map[string][]*Inner  `msgpack:"deep"`
	Fine  []string             `msgpack:"fine"`
	Later func() error         `msgpack:"-"`
	Pair  map[complex64]string `msgpack:"pair"`
}

type Inner struct {
	Callback func()
}

type Reply struct {
	Z complex128
}
