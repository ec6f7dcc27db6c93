package concurrent

import "context"

//fero:resource ledger
type Ledger interface {
	//fero:concurrent
	Balance(ctx context.Context, req *Account) error
	//fero:concurrent yes
	Audit(ctx context.Context, req *Account) error
	//fero:concurrent
	//fero:concurrent
	Total(ctx context.Context, req *Account) error
	//fero:concurrent
	Watch(ctx context.Context, req *Account, send func(*Account) error) error
	//fero:concurrent
	Wrong(ctx context.Context, req Account) error
}

// Not a resource: the directive has no verb to mark.
type Plain interface {
	//fero:concurrent
	Balance(ctx context.Context, req *Account) error
}

//fero:concurrent
type Account struct {
	ID string `msgpack:"id" fero:"key"`
}

//fero:concurrent
func Balance() {}

//fero:concurent
var _ = 0
