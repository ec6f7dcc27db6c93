// Package ledger covers //fero:concurrent: verbs that only read run
// without their key's turn, beside verbs that take it and a stream, which
// never takes one. A second resource in the package has no concurrent
// verb, and registers as one without the directive does.
package ledger

import "context"

//fero:resource ledger
type Ledger interface {
	// Balance only reads.
	//
	//fero:concurrent
	Balance(ctx context.Context, req *Account) (*Amount, error)
	// Deposit writes: it takes its key's turn.
	Deposit(ctx context.Context, req *Deposit) (*Amount, error)
	// Audit only reads, and keeps a verb of its own.
	//
	//fero:verb AUDIT_LOG
	//fero:concurrent
	Audit(ctx context.Context, req *Account) error
	// History streams the account's deposits.
	History(ctx context.Context, req *Account, send func(*Deposit) error) error
}

//fero:resource vault
type Vault interface {
	Open(ctx context.Context, req *Account) error
}

type Account struct {
	ID string `msgpack:"id" fero:"key"`
}

type Deposit struct {
	ID     string `msgpack:"id" fero:"key"`
	Amount int    `msgpack:"amount"`
}

type Amount struct {
	Amount int `msgpack:"amount"`
}
