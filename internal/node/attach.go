package node

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/membership"
	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/transport"
	"github.com/fero-go/fero/internal/wire"
)

// Attached clients (docs/engine.md, "Attached clients") are client nodes
// that proved a client token to the servers rather than the cluster
// secret. They do not gossip: each learns the servers from one of them
// (protocol.OpMembers), opens a connection to every server, proves its token on it
// and names itself in a hello marked Attach. A server takes such a
// connection as a client's, lists the client among its copies while the
// connection lives (owners push commits on it), and steps its engine
// messages with Engine.StepLimited: its writes, its fetches and its acks,
// nothing else.

// membersWaitMax bounds how long a server holds a protocol.OpMembers whose caller
// has the current list.
const membersWaitMax = 10 * time.Second

type membersAsk struct {
	Have uint64 `msgpack:"h"`
	// Wait is how long the caller lets the server hold the call, in ms.
	Wait int64 `msgpack:"w"`
}

type membersReply struct {
	Servers []membership.Meta `msgpack:"s"`
	Version uint64            `msgpack:"v"`
}

// attachedSet is a server's live attached clients: ID → the connection
// it attached on.
type attachedSet struct {
	mu    sync.Mutex
	conns map[string]*transport.Conn
}

// ids returns the attached clients' IDs, sorted.
func (a *attachedSet) ids() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.conns))
	for id := range a.conns {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// serveAttach answers an attached client's hello (pool.serveHello hands
// it over): it takes the connection as the client's if it proved a
// token, or the node takes no credentials.
func (n *Node) serveAttach(r *transport.Request, h hello) {
	c := r.Conn()
	if !n.started.Load() {
		_ = r.Fail(errs.New(errs.Unavailable, "attach: the node is starting"))
		return
	}
	if err := attachRefusal(h.ID, n.cfg.Client, n.authRequired(), n.connRole(c)); err != nil {
		_ = r.Fail(err)
		if errs.CodeOf(err) == errs.PermissionDenied {
			n.peers.pool.refused(c, h.ID, "an attached client's hello on a connection that proved no client token")
			n.closeUnproved(c)
		}
		return
	}
	out := hello{ID: n.id}
	n.peers.pool.proto.announce(&out)
	b, err := msgpack.Marshal(out)
	if err != nil {
		_ = r.Fail(err)
		return
	}
	n.attach.set.mu.Lock()
	if n.attach.set.conns == nil {
		n.attach.set.conns = map[string]*transport.Conn{}
	}
	old := n.attach.set.conns[h.ID]
	n.attach.set.conns[h.ID] = c
	n.attach.set.mu.Unlock()
	if old != c {
		n.logger.Info("fero: node: a client attached", "client", h.ID, "remote", c.RemoteAddr())
		go func() {
			<-c.Done()
			n.attach.set.mu.Lock()
			gone := n.attach.set.conns[h.ID] == c
			if gone {
				delete(n.attach.set.conns, h.ID)
			}
			n.attach.set.mu.Unlock()
			if gone {
				n.logger.Info("fero: node: an attached client's connection closed", "client", h.ID)
				n.view.refresh()
			}
		}()
	}
	_ = r.Reply(b)
	// The newer connection of one ID wins (pool.adopt): the client dialed
	// again because it gave up on the older.
	n.peers.pool.adopt(h.ID, c, h.ID, 0) // an attached client: its protocol is not noted
	n.view.refresh()
}

// attachRefusal says why a node refuses an attached client's hello that
// names id: nil if it takes it. client: the node is a client; needToken:
// the node takes credentials; proved: what the connection proved.
func attachRefusal(id string, client, needToken bool, proved role) error {
	switch {
	case client:
		return errs.New(errs.FailedPrecondition, "attach: this node is a client; attach to a server")
	case !membership.IsAttached(id) || len(id) > membership.MaxIDLen:
		return errs.Errorf(errs.InvalidArgument, "attach: an attached client's ID begins with %q and has at most %d bytes", membership.AttachedPrefix, membership.MaxIDLen)
	case needToken && proved < roleClient:
		return errs.New(errs.PermissionDenied, "attach: prove a client token first (fero.WithToken)")
	}
	return nil
}

// connRole is the role a connection proved with protocol.OpAuth.
func (n *Node) connRole(c *transport.Conn) role {
	n.auth.mu.Lock()
	defer n.auth.mu.Unlock()
	return n.auth.conns[c]
}

// serverList returns the live servers that publish a data address, as
// an attached client learns them, and the list's version.
func (n *Node) serverList() ([]membership.Meta, uint64) {
	var out []membership.Meta
	h := fnv.New64a()
	for _, m := range n.ms.Members() {
		if m.Role != membership.RoleServer || m.Addr == "" {
			continue
		}
		out = append(out, m.Meta)
		fmt.Fprintf(h, "%s\x00%s\x00%d\x00", m.ID, m.Addr, m.Boot)
	}
	v := h.Sum64()
	if v == 0 {
		v = 1 // 0 is the version of no list
	}
	return out, v
}

// serveMembers answers protocol.OpMembers, holding the call while the caller's
// list is current, up to the wait it asked for.
func (n *Node) serveMembers(r *transport.Request) {
	var ask membersAsk
	if err := wire.DecodeValue(r.Payload(), &ask); err != nil {
		_ = r.Fail(errs.New(errs.InvalidArgument, "malformed members request"))
		return
	}
	if n.cfg.Client {
		_ = r.Fail(errs.New(errs.FailedPrecondition, "members: this node is a client; ask a server"))
		return
	}
	wait := min(time.Duration(max(ask.Wait, 0))*time.Millisecond, membersWaitMax)
	if !n.spawn(func() {
		deadline := time.NewTimer(wait)
		defer deadline.Stop()
		for {
			changed := n.view.watch()
			list, v := n.serverList()
			if v != ask.Have {
				n.replyMembers(r, list, v)
				return
			}
			select {
			case <-changed:
			case <-deadline.C:
				n.replyMembers(r, list, v)
				return
			case <-r.Context().Done():
				return
			}
		}
	}) {
		_ = r.Fail(protocol.ErrClosed)
	}
}

func (n *Node) replyMembers(r *transport.Request, list []membership.Meta, v uint64) {
	b, err := msgpack.Marshal(membersReply{Servers: list, Version: v})
	if err != nil {
		_ = r.Fail(errs.Errorf(errs.Internal, "members: %v", err))
		return
	}
	_ = r.Reply(b)
}

// feeder is an attached client's end of OpMembers: the connection it
// asks on, and the servers' addresses it may ask at.
type feeder struct {
	mu    sync.Mutex
	c     *transport.Conn
	known []string // the servers' data addresses of the last list
	next  int      // where the next round of dials starts
}

// close closes the connection protocol.OpMembers goes on; the feed has stopped
// (Node.Close closes the membership first).
func (f *feeder) close() {
	f.mu.Lock()
	c := f.c
	f.c = nil
	f.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// feedWait is how long an attached client lets a server hold protocol.OpMembers.
const feedWait = 5 * time.Second

// feedMembers is the attached client's membership.Feed.
func (n *Node) feedMembers(ctx context.Context, have uint64) ([]membership.Meta, uint64, error) {
	c, err := n.feedConn(ctx)
	if err != nil {
		if errs.CodeOf(err) == errs.PermissionDenied {
			err = errors.Join(membership.ErrFeedRefused, err)
		}
		return nil, 0, err
	}
	b, err := msgpack.Marshal(membersAsk{Have: have, Wait: feedWait.Milliseconds()})
	if err != nil {
		return nil, 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, feedWait+attachDialTimeout)
	defer cancel()
	reply, err := c.Call(cctx, protocol.OpMembers, b)
	if err != nil {
		n.attach.feed.mu.Lock()
		if n.attach.feed.c == c {
			n.attach.feed.c = nil
		}
		n.attach.feed.mu.Unlock()
		c.Close()
		err = fmt.Errorf("asking %s for the cluster's servers: %w", c.RemoteAddr(), err)
		if errs.CodeOf(err) == errs.PermissionDenied {
			err = errors.Join(membership.ErrFeedRefused, err)
		}
		return nil, 0, err
	}
	var rep membersReply
	if err := wire.DecodeValue(reply, &rep); err != nil {
		c.Close()
		return nil, 0, fmt.Errorf("the cluster's servers from %s: %w", c.RemoteAddr(), err)
	}
	known := make([]string, 0, len(rep.Servers))
	for _, m := range rep.Servers {
		known = append(known, m.Addr)
	}
	n.attach.feed.mu.Lock()
	n.attach.feed.known = known
	n.attach.feed.mu.Unlock()
	return rep.Servers, rep.Version, nil
}

// feedConn returns the connection protocol.OpMembers goes on, dialing the given
// servers and then the last known ones, in turn, until one answers and
// takes the client's token.
func (n *Node) feedConn(ctx context.Context) (*transport.Conn, error) {
	n.attach.feed.mu.Lock()
	if c := n.attach.feed.c; c != nil && c.Err() == nil {
		n.attach.feed.mu.Unlock()
		return c, nil
	}
	addrs := append(slices.Clone(n.cfg.Servers), n.attach.feed.known...)
	start := n.attach.feed.next
	n.attach.feed.next++
	n.attach.feed.mu.Unlock()
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	var errsSeen []error
	for i := range addrs {
		addr := addrs[(start+i)%len(addrs)]
		c, err := n.dialAttached(ctx, addr)
		if err != nil {
			errsSeen = append(errsSeen, err)
			continue
		}
		n.attach.feed.mu.Lock()
		n.attach.feed.c = c
		n.attach.feed.mu.Unlock()
		return c, nil
	}
	return nil, errors.Join(errsSeen...)
}

// dialAttached opens a connection to a server and proves the client's
// token on it (if it has one).
func (n *Node) dialAttached(ctx context.Context, addr string) (*transport.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, attachDialTimeout)
	defer cancel()
	c, err := transport.DialConn(dctx, addr, n.peers.pool.opts...)
	if err != nil {
		return nil, err
	}
	if t := n.peers.pool.token; t != nil {
		if err := protocol.Authenticate(dctx, c, protocol.CredToken, t); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// attachDialTimeout bounds an attached client's dial of a server for
// protocol.OpMembers, and its proof of the token.
const attachDialTimeout = 5 * time.Second
