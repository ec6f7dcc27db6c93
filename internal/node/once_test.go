package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fero-go/fero/internal/errs"
	"github.com/fero-go/fero/internal/partition"
	"github.com/fero-go/fero/internal/transport"
)

// TestAttempts: which failures a write that names its writer makes again,
// and what its caller is told when the attempts end.
func TestAttempts(t *testing.T) {
	once := Once{Writer: "w", Seq: 1}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Lost track of (indefinite): again; then a refusal of the retry is
	// made again too, and if the attempts end on it the caller is told
	// indefinite: the first attempt may have committed. (Before, the
	// refusal reached the caller as definite: the fault suite's set
	// workload found committed pushes answered "no quorum".)
	a := newAttempts(ctx, once)
	for _, err := range []error{partition.ErrOwnershipLost, partition.ErrOwnerGone, transport.ErrConnLost, errClosedInFlight} {
		assert.True(t, a.again(err), "%v", err)
	}
	assert.True(t, a.again(partition.ErrNoQuorum), "a refusal after an indefinite failure")
	got := a.answer(partition.ErrNoQuorum)
	assert.False(t, errs.Definite(got), "told definite after an indefinite attempt: %v", got)
	assert.ErrorIs(t, got, partition.ErrNoQuorum)
	assert.Nil(t, a.answer(nil))

	// A first attempt refused is the caller's answer, as it was; but one
	// that met a non-owner goes again to the owner by then.
	b := newAttempts(ctx, once)
	assert.False(t, b.again(partition.ErrNoQuorum))
	assert.Equal(t, partition.ErrNoQuorum, b.answer(partition.ErrNoQuorum))
	assert.True(t, b.again(partition.ErrNotOwner))
	assert.False(t, b.uncertain)
	// A handler's own answer is never made again.
	assert.False(t, b.again(errs.Errorf(409, "taken")))

	// Without a writer nothing is made again.
	c := newAttempts(ctx, Once{})
	assert.False(t, c.again(partition.ErrOwnershipLost))

	// Past the budget, no more attempts.
	expired, stop := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer stop()
	d := newAttempts(expired, once)
	assert.False(t, d.again(partition.ErrOwnershipLost))
}
