// A connection's read side: the reader goroutine (readLoop), the preface,
// the warnings it logs as a connection closes, and dispatch, which hands
// each frame read to the serving side (conn_serve.go) or to the call it
// answers (conn_call.go).

package transport

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/fero-go/fero/internal/wire"
)

func (c *Conn) readLoop() {
	defer close(c.readerDone)
	if c.cfg.afterBurst != nil {
		// Whatever a handler put off for the rest of a burst the
		// reader will not finish.
		defer c.cfg.afterBurst()
	}
	// On an accepted connection the preface and the first frame share
	// one deadline; see WithConnectTimeout.
	by := time.Now().Add(c.cfg.connectTimeout)
	if err := c.readPreface(by); err != nil {
		if c.ended.Load() {
			return // we closed it: a stranger's place taken, say
		}
		c.warn("fero: transport: closing connection", err)
		c.end(c.lost(err), false)
		return
	}
	r := wire.NewReader(c.nc, c.cfg.maxFrame)
	r.SetAlloc(c.freeBlk.get)
	if !c.proved.Load() {
		// A stranger's frames are a handshake's: a small frame in a
		// small block, until it proves itself.
		c.limited = true
		r.SetLimits(c.cfg.authMaxFrame, max(wire.MinBlockSize, c.cfg.authMaxFrame))
	}
	c.rd = r
	if !c.accepted {
		by = time.Time{}
	}
	if err := r.SetFrameTimeout(c.cfg.frameTimeout, by, c.nc.SetReadDeadline); err != nil {
		c.end(c.lost(err), false)
		return
	}
	holding, exact := false, false
	for {
		if c.limited && c.proved.Load() {
			c.limited = false
			r.SetLimits(c.cfg.maxFrame, 0)
		}
		if !exact && c.trusted.Load() {
			exact = true
			r.SetExact(c.cfg.maxFrame)
		}
		var f wire.Frame
		if err := r.Next(&f); err != nil {
			if c.ended.Load() {
				return // we closed it
			}
			switch {
			case c.limited && errors.Is(err, wire.ErrFrameTooLarge):
				if st := c.cfg.stats; st != nil {
					st.PreAuthFrameTooLarge.Add(1)
				}
				c.warn("fero: transport: closing a connection that proved nothing: frame over the pre-auth limit", err)
			case errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrFrameTooLarge):
				c.warn("fero: transport: closing connection after bad input", err)
			case errors.Is(err, wire.ErrFrameTimeout):
				c.warn("fero: transport: closing connection: a frame did not arrive in time", err)
			default:
				c.cfg.logger.Debug("fero: transport: connection lost", "remote", c.nc.RemoteAddr(), "err", err)
			}
			c.end(c.lost(err), false)
			return
		}
		if c.held != nil {
			if id, _ := r.Block(); id != c.held.id {
				c.leaveHeld() // the reader reads into another block now
			}
		}
		// Answers queue up while the reader dispatches, without waking
		// the writer; they leave together once no complete frame waits
		// in memory, written by the reader itself if nobody is writing.
		more := r.Buffered()
		c.more = more
		if !holding {
			c.out.setHold(true)
			holding = true
		}
		keep, err := c.dispatch(&f)
		if err != nil {
			c.warn("fero: transport: closing connection after protocol error", err)
			c.end(c.lost(err), false)
			return
		}
		if keep {
			// The frame's bytes outlive this dispatch: keep the block.
			r.Pin()
			if f.Kind != wire.KindSend {
				c.pinOther()
			}
		}
		if !more {
			if c.cfg.afterBurst != nil {
				c.cfg.afterBurst()
			}
			if holding {
				c.out.setHold(false)
				holding = false
			}
		}
	}
}

// warn logs why the connection closes. On a server's connections a line
// passes at most once per source address, kind of line and kind of error
// per refusalLogEvery (with a count of those held back), so that whoever
// reaches the port cannot flood the log by sending garbage on many
// connections.
func (c *Conn) warn(msg string, err error) {
	if c.cfg.warns == nil {
		c.cfg.logger.Warn(msg, "remote", c.nc.RemoteAddr(), "err", err)
		return
	}
	k := warnKey{msg: msg, kind: errKind(err)}
	if ap, perr := netip.ParseAddrPort(c.nc.RemoteAddr().String()); perr == nil {
		k.ip = ap.Addr().Unmap()
	}
	if log, held := c.cfg.warns.note(k, time.Now()); log {
		c.cfg.logger.Warn(msg, "remote", c.nc.RemoteAddr(), "err", err, "held_back", held)
	}
}

// warnKey is what a connection's warnings are rate-limited by.
type warnKey struct {
	ip   netip.Addr
	msg  string
	kind int
}

// errKind sorts the errors a connection closes on into a few kinds, so
// that each kind is logged from a source even while another floods.
func errKind(err error) int {
	switch {
	case errors.Is(err, wire.ErrFrameTooLarge):
		return 1
	case errors.Is(err, wire.ErrMalformed):
		return 2
	case errors.Is(err, wire.ErrFrameTimeout):
		return 3
	case errors.Is(err, ErrAuthTimeout):
		return 4
	}
	return 0
}

// heldBytes is about what the connection held in memory when it ended
// (the scavenger's measure): its read blocks and connOverhead. Called
// once its reader has ended.
func (c *Conn) heldBytes() int {
	n := connOverhead
	if c.rd != nil {
		n += cap(c.rd.BlockBytes())
	}
	c.freeBlk.mu.Lock()
	n += c.freeBlk.bytes
	c.freeBlk.mu.Unlock()
	return n
}

// readPreface reads and checks the peer's preface, which must arrive by
// the given time. It leaves the read deadline set on an accepted
// connection, for the first frame.
func (c *Conn) readPreface(by time.Time) error {
	var got [len(preface)]byte
	if err := c.nc.SetReadDeadline(by); err != nil {
		return err
	}
	if _, err := io.ReadFull(c.nc, got[:]); err != nil {
		return fmt.Errorf("reading preface: %w", err)
	}
	if [4]byte(got[:4]) != [4]byte(preface[:4]) {
		return fmt.Errorf("%w: not a fero peer (preface % x)", wire.ErrMalformed, got)
	}
	if got[7] != protocolVersion {
		return fmt.Errorf("%w: peer speaks protocol version %d, we speak %d", wire.ErrMalformed, got[7], protocolVersion)
	}
	if c.accepted {
		return nil
	}
	return c.nc.SetReadDeadline(time.Time{})
}

// dispatch handles one frame and reports whether its bytes must stay valid
// after it returns: a request still unanswered, or a reply handed to a
// goroutine other than the reader's. Everything else lets the reader
// refill the block.
func (c *Conn) dispatch(f *wire.Frame) (keep bool, err error) {
	switch f.Kind {
	case wire.KindSend, wire.KindCall, wire.KindStream:
		return c.serve(f)
	case wire.KindReply, wire.KindChunk, wire.KindError:
		return c.complete(f), nil
	case wire.KindCancel:
		c.cancelRequest(f.ID)
	case wire.KindCredit:
		return false, c.serveCredit(f)
	}
	return false, nil
}
