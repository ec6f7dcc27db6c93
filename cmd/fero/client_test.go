package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPutValueRule: put's VALUE is JSON, or a bare word taken as a string;
// one that starts like JSON and does not parse fails before anything is
// sent, saying how to store it as a string.
func TestPutValueRule(t *testing.T) {
	for _, c := range []struct {
		arg  string
		want any
	}{
		{`{"name":"Ada"}`, map[string]any{"name": "Ada"}},
		{` [1, 2]`, []any{1.0, 2.0}},
		{`"02139"`, "02139"},
		{`36`, 36.0},
		{`-1.5e3`, -1500.0},
		{`true`, true},
		{`null`, nil},
		{`fr`, "fr"},
		{`2026-11-26`, "2026-11-26"},
		{`hello world`, "hello world"},
		{`True`, "True"},
		{``, ""},
	} {
		got, err := parseValue(c.arg, false)
		require.NoError(t, err, "%q", c.arg)
		assert.Equal(t, c.want, got, "%q", c.arg)
	}
	for _, arg := range []string{`{"name":`, `{"name":"Ada"} x`, `[1,2`, `"unterminated`, `  {name: "Ada"}`, `{}{}`} {
		got, err := parseValue(arg, true)
		require.NoError(t, err)
		assert.Equal(t, arg, got, "--string keeps %q as it is", arg)
		_, err = parseValue(arg, false)
		require.Error(t, err, "%q", arg)
		assert.ErrorContains(t, err, "is not valid JSON", "%q", arg)
		assert.ErrorContains(t, err, "--string", "%q", arg)
	}
	_, err := parseValue(`{"name":`, false)
	assert.EqualError(t, err, `VALUE {"name": is not valid JSON: unexpected end of JSON input at byte 8; a VALUE that starts with {, [ or " must be JSON (to store it as a string, use --string)`)

	// Through the command: the bad VALUE is refused before put looks for
	// a node to send it to.
	t.Setenv("FERO_ADDR", "")
	ctx := context.Background()
	_, err = run(ctx, "put", "ada", `{"name":`)
	assert.ErrorContains(t, err, "is not valid JSON")
	_, err = run(ctx, "put", "ada", "fr")
	assert.ErrorIs(t, err, errNoAddr, "a bare word is a string")
	_, err = run(ctx, "put", "--string", "ada", `{"name":`)
	assert.ErrorIs(t, err, errNoAddr, "--string takes anything")
}

// TestPutGetOneNode runs the README's put and get examples against one
// `fero serve` process: get prints one line, exactly what the README says,
// and a malformed VALUE writes nothing.
func TestPutGetOneNode(t *testing.T) {
	s := serve(t, "users", "--id", "n1", "--partitions", "7")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put := func(args ...string) error {
		_, err := run(ctx, append([]string{"put", "--addr", s.data}, args...)...)
		return err
	}
	get := func(key string) string {
		t.Helper()
		out, err := run(ctx, "get", "--addr", s.data, key)
		require.NoError(t, err, "get %s", key)
		return out
	}

	require.NoError(t, put("ada", `{"name":"Ada","langs":["en"]}`))
	require.NoError(t, put("ada.langs.-", "fr"))
	require.NoError(t, put("--wait", "majority", "ada.age", "36"))
	assert.Equal(t, `{"age":36,"langs":["en","fr"],"name":"Ada"}`+"\n", get("ada"), "README.md's fero CLI section")

	require.NoError(t, put("--wait", "majority", "k", `"v"`))
	assert.Equal(t, `"v"`+"\n", get("k"), "docs/storage.md's quick check")

	require.NoError(t, put("--string", "motto", `{"name":`))
	assert.Equal(t, `"{\"name\":"`+"\n", get("motto"))

	err := put("bad", `{"name":`)
	require.ErrorContains(t, err, "is not valid JSON")
	_, err = run(ctx, "get", "--addr", s.data, "bad")
	assert.ErrorContains(t, err, "not found", "a malformed VALUE writes nothing")
	s.stop(t)
}

// TestCompareAndSetFromTheCLI: get --version prints a key's version, put
// and rm --if-version write only at that version, and a stale one fails
// naming the current version.
func TestCompareAndSetFromTheCLI(t *testing.T) {
	s := serve(t, "users", "--id", "n1", "--partitions", "7")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := func(args ...string) (string, error) {
		return run(ctx, append(args[:1:1], append([]string{"--addr", s.data}, args[1:]...)...)...)
	}
	require.NoError(t, retryCLI(ctx, func() error { _, err := cli("put", "--if-version", "0", "ada", `{"n":1}`); return err }))
	out, err := cli("get", "--version", "ada")
	require.NoError(t, err)
	var ver uint64
	var value string
	_, err = fmt.Sscanf(out, "%d %s", &ver, &value)
	require.NoError(t, err, "%q", out)
	assert.Positive(t, ver)
	assert.Equal(t, `{"n":1}`, value)

	_, err = cli("put", "--if-version", "0", "ada", `{"n":2}`)
	require.Error(t, err, "a create of a key that exists")
	assert.ErrorContains(t, err, fmt.Sprintf("current version %d", ver))
	_, err = cli("put", "--add", "--if-version", "0", "ada", `{"n":2}`)
	assert.ErrorContains(t, err, "--if-version goes with an UPDATE")
	_, err = cli("put", "--if-version", "-3", "ada", `{"n":2}`)
	assert.ErrorContains(t, err, "a version is 0 (absent) or more")
	_, err = cli("put", "--if-version", "x", "ada", `{"n":2}`)
	assert.ErrorContains(t, err, "invalid argument")

	_, err = cli("put", "--if-version", fmt.Sprint(ver), "ada.n", "2")
	require.NoError(t, err)
	out, err = cli("get", "--version", "ada")
	require.NoError(t, err)
	assert.NotEqual(t, fmt.Sprintf("%d {\"n\":2}\n", ver), out, "the version moved")
	assert.Contains(t, out, `{"n":2}`)
	_, err = cli("rm", "--if-version", fmt.Sprint(ver), "ada")
	assert.ErrorContains(t, err, "failed_precondition")
	var now uint64
	_, err = fmt.Sscanf(out, "%d", &now)
	require.NoError(t, err)
	_, err = cli("rm", "--if-version", fmt.Sprint(now), "ada")
	require.NoError(t, err)
	_, err = cli("get", "--version", "ada")
	assert.ErrorContains(t, err, "not found (version 0)")
}

// retryCLI retries f while the node is still forming (Unavailable).
func retryCLI(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil || !strings.Contains(err.Error(), "unavailable") || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
