package redissut

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readAll parses replies until the first error; data is copied out.
func readAll(r io.Reader, size int) ([]reply, error) {
	rr := replyReader{br: bufio.NewReaderSize(r, size)}
	var out []reply
	for {
		rep, err := rr.next()
		if err != nil {
			return out, err
		}
		if rep.data != nil {
			rep.data = bytes.Clone(rep.data)
		}
		out = append(out, rep)
	}
}

func TestReplyReaderParsesEveryKind(t *testing.T) {
	big := strings.Repeat("0123456789", 10) // larger than the 32-byte buffer below
	in := "+OK\r\n" +
		"-ERR unknown command 'FOO'\r\n" +
		":1000\r\n" +
		":-9223372036854775808\r\n" +
		"$5\r\nhello\r\n" +
		"$0\r\n\r\n" +
		"$-1\r\n" +
		"$4\r\na\r\nb\r\n" + // CRLF inside a bulk string is data
		"$100\r\n" + big + "\r\n" +
		"+PONG\r\n"
	want := []reply{
		{kind: '+', data: []byte("OK")},
		{kind: '-', data: []byte("ERR unknown command 'FOO'")},
		{kind: ':', data: []byte("1000")},
		{kind: ':', data: []byte("-9223372036854775808")},
		{kind: '$', data: []byte("hello")},
		{kind: '$', data: []byte{}},
		{kind: '$'},
		{kind: '$', data: []byte("a\r\nb")},
		{kind: '$', data: []byte(big)},
		{kind: '+', data: []byte("PONG")},
	}
	for _, tc := range []struct {
		name string
		r    io.Reader
		size int
	}{
		{"whole", strings.NewReader(in), 4096},
		{"one byte at a time", iotest.OneByteReader(strings.NewReader(in)), 4096},
		{"one byte at a time, small buffer", iotest.OneByteReader(strings.NewReader(in)), 32},
		{"half reads", iotest.HalfReader(strings.NewReader(in)), 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAll(tc.r, tc.size)
			require.ErrorIs(t, err, io.EOF)
			assert.Equal(t, want, got)
		})
	}
}

func TestReplyReaderRejectsMalformedReplies(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     error
	}{
		{"array", "*1\r\n$2\r\nOK\r\n", ErrProtocol},
		{"RESP3 map", "%1\r\n", ErrProtocol},
		{"missing CR", "+OK\n", ErrProtocol},
		{"empty line", "\r\n", ErrProtocol},
		{"bad integer", ":12a\r\n", ErrProtocol},
		{"empty integer", ":\r\n", ErrProtocol},
		{"bad bulk length", "$x\r\n", ErrProtocol},
		{"negative bulk length", "$-2\r\n", ErrProtocol},
		{"huge bulk length", "$999999999999\r\n", ErrProtocol},
		{"bulk without CRLF", "$2\r\nOKxx", ErrProtocol},
		{"line longer than the buffer", "+" + strings.Repeat("x", 100) + "\r\n", ErrProtocol},
		{"cut in a line", "+OK", io.ErrUnexpectedEOF},
		{"cut in a bulk string", "$5\r\nhel", io.ErrUnexpectedEOF},
		{"cut in a large bulk string", "$50\r\n" + strings.Repeat("x", 30), io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAll(iotest.OneByteReader(strings.NewReader(tc.in)), 32)
			assert.Empty(t, got)
			assert.ErrorIs(t, err, tc.want)
		})
	}
}

func TestReplyErrorText(t *testing.T) {
	err := reply{kind: '-', data: []byte("ERR wrong")}.err()
	var re ReplyError
	require.True(t, errors.As(err, &re))
	assert.Equal(t, ReplyError("ERR wrong"), re)
	assert.Contains(t, err.Error(), "ERR wrong")
	assert.NoError(t, reply{kind: '+', data: []byte("OK")}.err())
}

// FuzzReplyReader checks that any input parses to the same replies, and
// fails at the same point, however the reads are split.
func FuzzReplyReader(f *testing.F) {
	for _, s := range []string{
		"+OK\r\n", "-ERR x\r\n", ":1\r\n", "$3\r\nabc\r\n", "$-1\r\n", "$0\r\n\r\n",
		"$70\r\n" + strings.Repeat("y", 70) + "\r\n", "*1\r\n", "+OK\n", "$2\r\nab",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		whole, werr := readAll(bytes.NewReader(in), 64)
		split, serr := readAll(iotest.OneByteReader(bytes.NewReader(in)), 64)
		require.Equal(t, whole, split)
		require.Equal(t, werr == io.EOF, serr == io.EOF, "whole: %v, split: %v", werr, serr)
		require.Equal(t, errors.Is(werr, ErrProtocol), errors.Is(serr, ErrProtocol), "whole: %v, split: %v", werr, serr)
	})
}
