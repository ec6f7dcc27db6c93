package fero

import (
	"strings"
	"time"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/storage"
)

// Fsync is when a server's data directory makes writes durable
// (docs/storage.md has what each wait level promises under each policy).
type Fsync struct{ policy storage.SyncPolicy }

var (
	// FsyncGroup (the default) fsyncs once per round of the engine before
	// any message or answer of that round leaves the node: every write that
	// arrived meanwhile shares the fsync (group commit). Ack means on the
	// owner's disk, Majority on the disks of a majority of the servers,
	// and a whole-cluster crash loses nothing acknowledged.
	FsyncGroup = Fsync{storage.SyncPolicy{Mode: storage.SyncEachGroup}}
	// FsyncNever hands writes to the operating system each round and never
	// fsyncs before a clean close: a killed process loses nothing, a crash
	// of the machine whatever the OS had not written back.
	FsyncNever = Fsync{storage.SyncPolicy{Mode: storage.SyncNever}}
)

// FsyncInterval fsyncs every d (100 ms if d is 0): a crash of the machine
// loses up to d of acknowledged writes.
func FsyncInterval(d time.Duration) Fsync {
	return Fsync{storage.SyncPolicy{Mode: storage.SyncInterval, Interval: d}}
}

// String spells the policy as ParseFsync reads it.
func (f Fsync) String() string {
	if f.policy.Mode == storage.SyncInterval && f.policy.Interval > 0 {
		return "interval=" + f.policy.Interval.String()
	}
	return f.policy.Mode.String()
}

// ParseFsync reads an fsync policy as `fero serve --fsync` spells it:
// "group", "interval", "interval=250ms" or "never".
func ParseFsync(s string) (Fsync, error) {
	switch s {
	case "group":
		return FsyncGroup, nil
	case "never":
		return FsyncNever, nil
	case "interval":
		return FsyncInterval(0), nil
	}
	if v, ok := strings.CutPrefix(s, "interval="); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return Fsync{}, errs.Errorf(errs.InvalidArgument, "fero: fsync %q: interval=D needs a positive duration", s)
		}
		return FsyncInterval(d), nil
	}
	return Fsync{}, errs.Errorf(errs.InvalidArgument, "fero: fsync %q: want group, interval, interval=D or never", s)
}

// WithDataDir keeps this server's partitions in dir (created if needed):
// each server has its own directory, which belongs to it and to one
// resource. A server that restarts on its directory loads its data and
// fetches only what it missed; with FsyncGroup (the default) it is the
// voter it was at once, and a whole cluster restarted on its directories
// keeps every acknowledged write. Without it a server keeps everything in
// memory and comes back empty (docs/storage.md). An empty WithID takes the
// node's ID from the directory. Not for clients: Open refuses it on a
// [Client] node.
func WithDataDir(dir string) NodeOption { return nodeOption(func(c *config) { c.dataDir = dir }) }

// WithFsync sets the data directory's fsync policy (default FsyncGroup).
// Without [WithDataDir] (so on a client node) it does nothing.
func WithFsync(f Fsync) NodeOption { return nodeOption(func(c *config) { c.fsync = f.policy }) }
