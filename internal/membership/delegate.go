package membership

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/wire"
)

// delegate receives memberlist's callbacks. memberlist calls most of them
// with its node lock held, so they only update the peer table and queue
// events; nothing here blocks.
type delegate struct{ m *Membership }

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.AliveDelegate    = (*delegate)(nil)
	_ memberlist.PingDelegate     = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
)

func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	m := d.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if existing.Name == m.meta.ID {
		// Another process says it is this member (DuplicateOf).
		m.selfConflict = other.Address()
		return
	}
	if _, ok := m.conflicts[other.Name]; ok || len(m.conflicts) < maxKnownPeers {
		m.conflicts[other.Name] = conflict{addr: other.Address(), at: time.Now()}
	}
}

func (d *delegate) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	if len(d.m.metaBytes) > limit {
		return nil // cannot happen: EncodeMeta enforces MetaMaxSize
	}
	return bytes.Clone(d.m.metaBytes)
}

// NotifyMsg handles user messages; the only one is a leave announcement.
func (d *delegate) NotifyMsg(b []byte) {
	id, boot, err := decodeLeaving(b)
	if err != nil {
		return
	}
	m := d.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.peers[id]; ok && p.m.Boot == boot && !p.m.Leaving {
		mem := p.m
		mem.Leaving = true
		m.setStatus(mem, time.Now())
	}
}
func (d *delegate) GetBroadcasts(int, int) [][]byte { return nil }
func (d *delegate) LocalState(bool) []byte          { return nil }
func (d *delegate) MergeRemoteState([]byte, bool)   {}
func (d *delegate) AckPayload() []byte              { return nil }
func (d *delegate) NotifyPingComplete(n *memberlist.Node, _ time.Duration, _ []byte) {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	if p, ok := d.m.peers[n.Name]; ok && p.m.Status == StatusSuspect {
		mem := p.m
		mem.Status = liveStatus(mem.Role)
		d.m.setStatus(mem, time.Now())
	}
}

// NotifyAlive admits or refuses a peer before memberlist adds it: metadata
// must decode, name the same resource, and match the node name.
func (d *delegate) NotifyAlive(n *memberlist.Node) error {
	meta, err := DecodeMeta(n.Meta)
	if err != nil {
		return err
	}
	m := d.m
	if meta.Resource != m.cfg.meta.Resource {
		return ErrForeignResource
	}
	if meta.ID != n.Name {
		return ErrInvalidMeta
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if n.Name == m.meta.ID {
		return nil
	}
	p, ok := m.peers[n.Name]
	switch {
	case !ok:
		if gone, ok := m.gone[n.Name]; ok && gone.boot == meta.Boot {
			// This life of the peer left for good (a closed member never
			// restarts; a new process has a new Boot): a stale message.
			return ErrInvalidMeta
		}
		m.setStatus(Member{Meta: meta, Gossip: n.Address(), Status: StatusConnecting}, time.Now())
	case p.m.Status == StatusSuspect && meta.Boot == p.m.Boot:
		// An alive message after suspicion is the peer refuting it.
		mem := p.m
		mem.Status = liveStatus(meta.Role)
		m.setStatus(mem, time.Now())
	}
	return nil
}

func (d *delegate) NotifyJoin(n *memberlist.Node) { d.live(n) }

func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.live(n) }

func (d *delegate) live(n *memberlist.Node) {
	meta, err := DecodeMeta(n.Meta)
	if err != nil {
		return // refused in NotifyAlive; the local node's meta is valid
	}
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	delete(d.m.conflicts, n.Name)
	d.m.setStatus(Member{Meta: meta, Gossip: n.Address(), Status: liveStatus(meta.Role)}, time.Now())
}

func (d *delegate) NotifyLeave(n *memberlist.Node) {
	m := d.m
	m.mu.Lock()
	p, ok := m.peers[n.Name]
	if !ok {
		m.mu.Unlock()
		return
	}
	mem := p.m
	mem.Gossip = n.Address()
	mem.Status = StatusDead
	if mem.Leaving {
		mem.Status = StatusRemoved
	}
	m.setStatus(mem, time.Now())
	m.mu.Unlock()
	if mem.Status == StatusDead {
		m.nudge()
	}
}

// msgLeaving tags a leave announcement among memberlist user messages.
const msgLeaving byte = 'L'

type leavingMsg struct {
	ID   string `msgpack:"i"`
	Boot uint64 `msgpack:"b"`
}

func encodeLeaving(id string, boot uint64) ([]byte, error) {
	b, err := msgpack.Marshal(&leavingMsg{ID: id, Boot: boot})
	return append([]byte{msgLeaving}, b...), err
}

// decodeLeaving decodes an untrusted user message.
func decodeLeaving(b []byte) (string, uint64, error) {
	if len(b) < 2 || len(b) > 1+memberlist.MetaMaxSize || b[0] != msgLeaving {
		return "", 0, ErrInvalidMeta
	}
	var msg leavingMsg
	if err := wire.DecodeValue(b[1:], &msg); err != nil { // lengths checked first (DecodeMeta)
		return "", 0, fmt.Errorf("%w: %w", ErrInvalidMeta, err)
	}
	if msg.ID == "" || len(msg.ID) > MaxIDLen {
		return "", 0, ErrInvalidMeta
	}
	return msg.ID, msg.Boot, nil
}

// suspect is called from the log bridge: memberlist tells no delegate
// about suspicion, only its log.
func (m *Membership) suspect(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.peers[name]; ok && p.m.Status.Live() && name != m.meta.ID {
		mem := p.m
		mem.Status = StatusSuspect
		m.setStatus(mem, time.Now())
	}
}

// logBridge turns memberlist's log lines ("[LEVEL] memberlist: text") into
// slog records, and picks out the one line that reports a suspicion.
//
// memberlist logs one ERROR line per packet it cannot take ("failed to
// receive: ... from=IP:port"), so anyone who can send UDP to the gossip
// port could flood the log. Lines that name a sender pass at most once
// per logEvery per kind of line and sending host; the next that passes
// says how many were held back.
type logBridge struct {
	m *Membership

	mu   sync.Mutex
	seen map[string]*heldLines
}

type heldLines struct {
	last time.Time
	held int
}

const (
	logEvery    = 10 * time.Second
	logKeysMax  = 4096
	fromMarker  = "from="
	kindKeySize = 48
)

// pass reports whether line may be logged now, and how many lines like it
// were held back since the last that passed.
func (b *logBridge) pass(line string, now time.Time) (ok bool, held int) {
	i := strings.LastIndex(line, fromMarker)
	if i < 0 {
		return true, 0
	}
	host := line[i+len(fromMarker):]
	if h, _, err := net.SplitHostPort(strings.Fields(host + " ")[0]); err == nil {
		host = h
	}
	kind := line[:i]
	if len(kind) > kindKeySize {
		kind = kind[:kindKeySize]
	}
	key := kind + "|" + host
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil || len(b.seen) >= logKeysMax {
		b.seen = make(map[string]*heldLines)
	}
	h := b.seen[key]
	if h == nil {
		b.seen[key] = &heldLines{last: now}
		return true, 0
	}
	if now.Sub(h.last) < logEvery {
		h.held++
		return false, 0
	}
	held = h.held
	h.last, h.held = now, 0
	return true, held
}

const suspectPrefix = "Suspect "
const suspectSuffix = " has failed, no acks received"

func (b *logBridge) Write(p []byte) (int, error) {
	level, line := logLevel(string(bytes.TrimRight(p, "\n")))
	if rest, ok := strings.CutPrefix(line, suspectPrefix); ok {
		if name, ok := strings.CutSuffix(rest, suspectSuffix); ok {
			b.m.suspect(name)
		}
	}
	ok, held := b.pass(line, time.Now())
	switch {
	case !ok:
	case held > 0:
		b.m.log.Log(context.Background(), level, line, "source", "memberlist", "held_back", held)
	default:
		b.m.log.Log(context.Background(), level, line, "source", "memberlist")
	}
	return len(p), nil
}

var logLevels = []struct {
	prefix string
	level  slog.Level
}{
	{"[DEBUG] ", slog.LevelDebug},
	{"[INFO] ", slog.LevelInfo},
	{"[WARN] ", slog.LevelWarn},
	{"[ERR] ", slog.LevelError},
	{"[ERROR] ", slog.LevelError},
}

// logLevel returns the level to log one of memberlist's lines at, and the
// line without its level and "memberlist: " prefixes.
//
// memberlist logs at ERROR every exchange with a peer that fails, though
// most fail because the peer is going away, which failure detection
// handles: a push/pull, a gossip or ack send, a fallback TCP ping or a
// stream read with a peer that was killed or is leaving gets a refused or
// reset connection, EOF or a broken pipe, and this member's own probes,
// reads and sends in flight when it closes get "use of closed network
// connection". Operators read "Push/Pull with n2 failed: dial tcp ...:
// connect: connection refused" at ERROR after stopping a server as a
// failure of the survivor. So an ERROR line is lowered by its cause:
//
//   - the peer's process closed or refused the connection, or this
//     member's socket closed (peerGone): DEBUG. The peer's end is reported
//     by failure detection ("Suspect ... has failed", "Marking ... as
//     failed", at INFO) and by fero's partition map changes.
//   - the peer's host did not answer in time or cannot be routed to
//     (peerUnreachable): WARN. A host that went down gives the same, but
//     so does a firewall or a lossy network while the peer is alive, which
//     an operator should see.
//
// Every other ERROR line stays an ERROR: messages that do not decode or
// decrypt (a peer with another secret, or not a peer), labels that do not
// match, a full push/pull queue, a conflicting address, a socket that
// cannot accept. memberlist's own WARN, INFO and DEBUG lines keep their
// level.
func logLevel(line string) (slog.Level, string) {
	level := slog.LevelInfo
	for _, l := range logLevels {
		if rest, ok := strings.CutPrefix(line, l.prefix); ok {
			line, level = rest, l.level
			break
		}
	}
	line, _ = strings.CutPrefix(line, "memberlist: ")
	if level != slog.LevelError {
		return level, line
	}
	for _, s := range peerGone {
		if strings.Contains(line, s) {
			return slog.LevelDebug, line
		}
	}
	for _, s := range peerUnreachable {
		if strings.Contains(line, s) {
			return slog.LevelWarn, line
		}
	}
	return level, line
}

// Causes of a failed exchange with a peer (see logLevel), as Go's net
// package words them.
var (
	peerGone        = []string{"connection refused", "connection reset by peer", "broken pipe", "EOF", "use of closed network connection"}
	peerUnreachable = []string{"i/o timeout", "no route to host", "network is unreachable", "host is down"}
)
