package main

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/pkg/fero"
)

// TestDemo runs the demo in this process: the outbox holds a welcome for
// each new user and an approval notice for each approved one, nothing
// for the other changes, and each user's mail in the order of its
// changes.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	var buf bytes.Buffer
	start := time.Now()
	outbox, err := runDemo(ctx, &buf)
	require.NoError(t, err, "transcript:\n%s", buf.String())
	t.Logf("demo took %v:\n%s", time.Since(start), buf.String())

	assert.ElementsMatch(t, expected, outbox)
	for _, to := range []string{"ann@example.com", "cy@example.com"} {
		welcome := slices.IndexFunc(outbox, func(m Email) bool { return m.To == to && m.Subject != "Your account is approved" })
		approved := slices.IndexFunc(outbox, func(m Email) bool { return m.To == to && m.Subject == "Your account is approved" })
		assert.Less(t, welcome, approved, "%s: the welcome comes first", to)
	}
}

// TestRules checks the chain's filters and drafts on single changes,
// without a cluster.
func TestRules(t *testing.T) {
	change := func(typ fero.ChangeType, key string, v any) fero.Change {
		b, err := msgpack.Marshal(v)
		require.NoError(t, err)
		return fero.Change{Kind: fero.Applied, Type: typ, Key: key, Value: b}
	}
	ann := User{Name: "Ann", Email: "ann@example.com"}
	seq := func(cs ...fero.Change) func(func(fero.Change) bool) { return slices.Values(cs) }
	svc := &Service{}
	var got []Email
	for m := range draft(filter(seq(
		change(fero.Add, "1", ann),
		change(fero.Update, "1", ann),          // not new
		change(fero.Add, "1.tags", []string{}), // not a user
		change(fero.Add, "2", map[string]any{"name": "no email"}),
		dropped(change(fero.Add, "3", ann)), // undone: not a sign-up
	), applied), when(isNewUser, welcome), when(isApproval, svc.approvalNotice)) {
		got = append(got, m)
	}
	assert.Equal(t, []Email{expected[0]}, got)
}

func dropped(c fero.Change) fero.Change {
	c.Kind = fero.Dropped
	return c
}
