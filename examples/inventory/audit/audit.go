// Package audit holds what records of several services carry to say who
// changed them last, and when. It is a package of its own so that the
// inventory's declarations embed a struct from another package, as a
// real service's shared types are.
package audit

import "time"

// Stamp says who made a change and when. Embedded in a record, its fields
// are promoted (item.By, item.At), and msgpack inlines them.
type Stamp struct {
	// By is the principal the caller authenticated as.
	By string `msgpack:"by"`
	// At is when the owner made the change, in UTC.
	At time.Time `msgpack:"at"`
}
