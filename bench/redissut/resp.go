package redissut

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// maxBulk bounds a bulk reply, as Redis's own proto-max-bulk-len does, so a
// corrupt length cannot make the client allocate without limit.
const maxBulk = 512 << 20

// ErrProtocol is returned, wrapped with the details, for a reply the client
// cannot parse. It ends the connection: every outstanding request fails
// with it.
var ErrProtocol = errors.New("redissut: protocol error")

// ReplyError is an error reply from Redis (a RESP "-" line), such as
// "ERR unknown command ...". It fails only its own request.
type ReplyError string

// Error returns the reply's text, such as "redis: ERR unknown command".
func (e ReplyError) Error() string { return "redis: " + string(e) }

// reply is one parsed RESP2 reply. data aliases the reader's buffer and is
// valid only until the next call of replyReader.next.
type reply struct {
	// kind is the RESP type byte: '+' simple string, '-' error, ':'
	// integer or '$' bulk string.
	kind byte
	// data is the line after the type byte without its CRLF, or a bulk
	// string's bytes. It is nil for a null bulk string ($-1).
	data []byte
}

// err returns the reply as a ReplyError if it is one.
func (r reply) err() error {
	if r.kind == '-' {
		return ReplyError(r.data)
	}
	return nil
}

// replyReader parses RESP2 replies from a buffered reader without
// allocating: lines and bulk strings that fit the buffer are handed out in
// place and skipped on the next call.
type replyReader struct {
	br   *bufio.Reader
	skip int    // bytes of the previous reply still in br
	big  []byte // holds a bulk string larger than br's buffer
}

// next reads one reply. Any error ends the stream: the reader is left at an
// unknown position.
func (r *replyReader) next() (reply, error) {
	if r.skip > 0 {
		if _, err := r.br.Discard(r.skip); err != nil {
			return reply{}, err
		}
		r.skip = 0
	}
	line, err := r.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return reply{}, fmt.Errorf("%w: reply line longer than %d bytes", ErrProtocol, r.br.Size())
		}
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return reply{}, io.EOF // between replies: the server closed
		}
		return reply{}, unexpectedEOF(err)
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return reply{}, fmt.Errorf("%w: reply line %q does not end in CRLF", ErrProtocol, line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+', '-':
		return reply{kind: kind, data: body}, nil
	case ':':
		if !isInt(body) {
			return reply{}, fmt.Errorf("%w: bad integer reply %q", ErrProtocol, body)
		}
		return reply{kind: kind, data: body}, nil
	case '$':
		n, ok := parseInt(body)
		switch {
		case !ok || n < -1 || n > maxBulk:
			return reply{}, fmt.Errorf("%w: bad bulk length %q", ErrProtocol, body)
		case n == -1:
			return reply{kind: kind}, nil
		}
		return r.bulk(int(n))
	default:
		return reply{}, fmt.Errorf("%w: unexpected reply type %q", ErrProtocol, kind)
	}
}

// bulk reads the n bytes and CRLF of a bulk string whose header was read.
func (r *replyReader) bulk(n int) (reply, error) {
	var p []byte
	if n+2 <= r.br.Size() {
		var err error
		if p, err = r.br.Peek(n + 2); err != nil {
			return reply{}, unexpectedEOF(err)
		}
		r.skip = n + 2
	} else {
		if cap(r.big) < n+2 {
			r.big = make([]byte, n+2)
		}
		p = r.big[:n+2]
		if _, err := io.ReadFull(r.br, p); err != nil {
			return reply{}, unexpectedEOF(err)
		}
	}
	if p[n] != '\r' || p[n+1] != '\n' {
		return reply{}, fmt.Errorf("%w: bulk string of %d bytes not followed by CRLF", ErrProtocol, n)
	}
	return reply{kind: '$', data: p[:n:n]}, nil
}

// unexpectedEOF reports an end of stream inside a reply as
// io.ErrUnexpectedEOF.
func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// isInt reports whether b is a RESP integer: an optional minus sign and at
// least one decimal digit. The value of an integer reply is the caller's
// to parse, so its range is not checked here.
func isInt(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseInt parses a bulk length: an optional minus sign and 1 to 18
// decimal digits, enough for any length and too few to overflow.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
