package interfaces

import (
	"context"
	"fmt"
)

//fero:resource things
type Things interface {
	Put(ctx context.Context, req *Request) (*Reply, error)
}

type Request struct {
	Key string `msgpack:"key" fero:"key"`
	// Any, Empty, Err, Skip and hidden are fine: msgpack decodes into an
	// empty interface, carries an error as its message, and skips the
	// last two.
	Any   any          `msgpack:"any"`
	Empty interface{}  `msgpack:"empty"`
	Err   error        `msgpack:"err"`
	Skip  fmt.Stringer `msgpack:"-"`
	//lint:ignore U1000 the case checks that ferogen skips it
	hidden fmt.Stringer
	Name   fmt.Stringer   `msgpack:"name"`
	List   []fmt.Stringer `msgpack:"list"`
	Nested *Nested        `msgpack:"nested"`
	Inline
}

type Nested struct {
	ByName map[string][]*Deep `msgpack:"by_name"`
}

type Deep struct {
	OK    string `msgpack:"ok"`
	Value Valuer `msgpack:"value"`
}

// Valuer is an interface of this package.
type Valuer interface {
	Value() int
}

// Inline is embedded: its fields are the request's.
type Inline struct {
	Keyed map[fmt.Stringer]int `msgpack:"keyed"`
}

type Reply struct {
	Items [2]struct {
		What fmt.Stringer `msgpack:"what"`
	} `msgpack:"items"`
}
