package history

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fero-go/fero/pkg/fero"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Outcome
	}{
		{fero.NewError(fero.CodeUnavailable, "no quorum"), Definite},
		{fero.Errorf(fero.CodeUnavailable, "fero: write %q: %w", "k", fero.NewError(fero.CodeUnavailable, "not owner, ring changing")), Definite},
		{fero.NewError(fero.CodeUnavailable, "no server owns the partition"), Definite},
		{fero.NewError(fero.CodeUnavailable, "sync queue full"), Definite},
		{fero.NewError(fero.CodeUnavailable, "no ring map yet"), Definite},
		{fero.NewError(fero.CodeFailedPrecondition, "exists"), Definite},
		{fero.NewError(fero.CodeInvalidArgument, "bad"), Definite},
		{fero.NewError(fero.CodeAlreadyExists, "exists"), Definite},
		{fmt.Errorf("write: %w", fero.NewError(fero.CodeUnavailable, "no quorum")), Definite},
		{fero.NewError(fero.CodeUnavailable, "write deadline passed before it was committed"), Definite},
		{fero.NewError(fero.CodeUnavailable, "partition epoch changed since the write was sent"), Definite},
		{fero.NewError(fero.CodeAborted, "ownership lost before the write was acknowledged"), Indefinite},
		{fero.NewError(fero.CodeAborted, "connection lost"), Indefinite},
		{fero.NewError(fero.CodeDeadlineExceeded, "write timed out in the partition engine"), Indefinite},
		{fero.NewError(fero.CodeInternal, "no quorum"), Indefinite},
		{context.DeadlineExceeded, Indefinite},
		{context.Canceled, Indefinite},
		{fmt.Errorf("some error"), Indefinite},
	} {
		require.Equal(t, tc.want, Classify(tc.err), "%v", tc.err)
	}
}

func TestLinesRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p1"+HistorySuffix)
	w, err := Create(path)
	require.NoError(t, err)
	ops := []Op{
		{Type: Invoke, Time: 1, Proc: 1, ID: 1, F: Write, Key: "k", Value: "p1-1", Wait: "majority"},
		{Type: OK, Time: 2, Proc: 1, ID: 1, F: Write, Key: "k", Value: "p1-1", Wait: "majority"},
		{Type: Invoke, Time: 3, Proc: 1, ID: 2, F: Read, Via: ViaOwner, Key: "k"},
		{Type: OK, Time: 4, Proc: 1, ID: 2, F: Read, Via: ViaOwner, Key: "k", Absent: true},
		{Type: OK, Time: 5, Proc: 1, ID: 3, F: Read, Via: ViaLocal, Key: "k"}, // the empty string
	}
	for _, op := range ops {
		require.NoError(t, w.Write(op))
	}
	fin := Final{Type: FinalLine, Time: 6, Proc: 1, Values: map[string]string{"k": "p1-1"}, Absent: []string{"j"}, Digest: "00ff", Converged: true}
	require.NoError(t, w.Write(fin))
	require.NoError(t, w.Close())

	b, err := os.ReadFile(path)
	require.NoError(t, err)
	// A line cut off by a kill is skipped.
	b = append(b, `{"type":"invoke","ti`...)
	got, gotFinal, err := Lines(strings.NewReader(string(b)))
	require.NoError(t, err)
	require.Equal(t, ops, got)
	require.Equal(t, &fin, gotFinal)

	_, _, err = Lines(strings.NewReader("{\"type\":\"ok\"}\nnot json\n"))
	require.ErrorContains(t, err, "line 2")
}

func TestNowIsMonotonic(t *testing.T) {
	a := Now()
	b := Now()
	require.Positive(t, a)
	require.GreaterOrEqual(t, b, a)
}

func TestTracePath(t *testing.T) {
	require.Equal(t, "/d/p1.trace.jsonl", TracePath("/d/p1.history.jsonl"))
}
