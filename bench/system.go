package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// System is one system under test. A server process calls Serve; a client
// process calls Dial. Both run in processes the harness starts, so an
// implementation holds no state between the two.
type System interface {
	// Serve runs one server until ctx is cancelled, then stops it and
	// returns. It calls ready once, with the address clients dial, when the
	// server accepts connections.
	Serve(ctx context.Context, opts ServeOptions, ready func(addr string)) error
	// Dial opens one client connection. The harness gives each client
	// process one Conn.
	Dial(ctx context.Context, opts DialOptions) (Conn, error)
}

// ServeOptions says where and as which member of the run a server starts.
type ServeOptions struct {
	// Addr is the address to listen on; port 0 picks a free port.
	Addr string `json:"addr"`
	// Index is this server's position among the run's servers, from 0.
	Index int `json:"index"`
	// Peers are the addresses of the servers started before this one, for
	// systems whose servers form a cluster.
	Peers []string `json:"peers,omitempty"`
	// DataDir is where a Durable system makes this server's data
	// directory (NewDataDir); empty is the OS's temporary directory.
	DataDir string `json:"data_dir,omitempty"`
}

// DialOptions says which servers a client may use and which client it is.
type DialOptions struct {
	// Servers are the addresses every server reported as ready, in order.
	Servers []string `json:"servers"`
	// Index is this client's position among the run's clients, from 0;
	// systems without routing spread clients as Servers[Index%len(Servers)].
	Index int `json:"index"`
}

// Conn is one client connection to a system under test. The scenarios use it
// from one goroutine at a time (Go's done callbacks run elsewhere).
//
// Contract, which the scenarios rely on to record without locks:
//   - No method retains payload after it returns.
//   - done is called exactly once for every Go that returned nil, and never
//     for one that returned an error. Calls of done never overlap and each
//     happens before the next, so state touched only by done needs no lock.
//     reply is valid only until done returns.
//   - Close fails every outstanding Go with an error and returns only after
//     every done has returned.
type Conn interface {
	// Send hands one one-way record to the connection. It may buffer; it
	// returns once the record is the connection's to deliver.
	Send(ctx context.Context, payload []byte) error
	// Sync returns once the server has received every record sent with Send
	// before the call: it is the "all acknowledged" point of one-way mode.
	Sync(ctx context.Context) error
	// Go sends a request without waiting and calls done with its reply.
	Go(ctx context.Context, payload []byte, done func(reply []byte, err error)) error
	// Call sends a request and waits for its reply.
	Call(ctx context.Context, payload []byte) ([]byte, error)
	// Close ends the connection; see the contract above.
	Close() error
}

// Replicator is implemented by a Conn whose system copies every record to
// several servers. Replicated returns once every server has applied every
// record acknowledged so far; the one-way scenario reports the time as the
// "replicated" milestone.
type Replicator interface {
	Replicated(ctx context.Context) error
}

// Durable is implemented by a System that can keep its servers' records on
// disk. The report names the policy beside each trial's figures, since it
// sets what a write costs.
type Durable interface {
	// Durability says when the servers fsync, as the report prints it
	// ("fsync group", "appendfsync always"); empty where this
	// configuration of the system keeps nothing on disk.
	Durability() string
}

// FsyncCounter is implemented by a Durable system whose servers count
// their fsyncs. The runner calls Fsyncs in the parent process for every
// server, just before each trial's measured window and just after it, and
// reports the difference as fsyncs per second and records per fsync.
type FsyncCounter interface {
	Durable
	// Fsyncs returns how many fsyncs of records the server at addr (as it
	// reported ready) has made since it started.
	Fsyncs(ctx context.Context, addr string) (uint64, error)
}

// NewDataDir makes a fresh, empty directory for one server of system to
// keep its data in, under parent (the OS's temporary directory if empty),
// and returns its absolute path: a server that runs another program may
// start it in a directory of its own. The server calls remove when it
// stops, so a run leaves nothing behind.
func NewDataDir(parent, system string) (dir string, remove func() error, err error) {
	if parent, err = filepath.Abs(cmp.Or(parent, os.TempDir())); err == nil {
		dir, err = os.MkdirTemp(parent, "fero-bench-"+system+"-")
	}
	if err != nil {
		return "", nil, fmt.Errorf("bench: make a data directory for %s (give a writable directory with --data-dir): %w", system, err)
	}
	remove = func() error {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("bench: remove %s's data directory: %w", system, err)
		}
		return nil
	}
	return dir, remove, nil
}

// Flusher is implemented by a Conn that buffers Send and Go until told to
// write (as the raw echo does, to be the fastest possible floor). The
// scenarios flush before they wait for anything the server must answer and
// at the end of each burst of sends. A Conn that writes on its own needs no
// Flush.
type Flusher interface {
	Flush(ctx context.Context) error
}

// flush flushes c if it buffers.
func flush(ctx context.Context, c Conn) error {
	if f, ok := c.(Flusher); ok {
		if err := f.Flush(ctx); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
	}
	return nil
}

// InterruptRead lets ctx's end interrupt a blocking read on c, for a Conn
// whose Call reads its reply itself: the read then fails with a deadline
// in the past. Call the function it returns once the read is over. If ctx
// ended just as the read got its data, that clears the deadline again, so
// the connection stays usable; a read that failed leaves the stream at an
// unknown point, and the caller must give the connection up.
func InterruptRead(ctx context.Context, c net.Conn) (done func()) {
	if ctx.Done() == nil {
		return func() {}
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = c.SetReadDeadline(time.Unix(1, 0))
		close(fired)
	})
	return func() {
		if !stop() {
			<-fired
			_ = c.SetReadDeadline(time.Time{})
		}
	}
}

// Registry maps a system's name, as given on the command line, to the
// system. The parent process passes names to its children, which look them
// up in their own copy of the registry.
type Registry map[string]System

// ErrUnknownSystem is returned for a system name missing from a Registry.
var ErrUnknownSystem = errors.New("bench: unknown system")

// Lookup returns the named system.
func (r Registry) Lookup(name string) (System, error) {
	s, ok := r[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownSystem, name, r.Names())
	}
	return s, nil
}

// Names lists the registered systems in sorted order.
func (r Registry) Names() []string {
	names := make([]string, 0, len(r))
	for n := range r {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
