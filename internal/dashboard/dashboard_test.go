package dashboard

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQuantileMs: the quantile of what a histogram gained between two
// readings, interpolated within its bucket; nil with nothing gained.
func TestQuantileMs(t *testing.T) {
	bounds := []float64{0.001, 0.002, 0.004, 0.008}
	before := []uint64{10, 10, 10, 10}
	// Gained: 50 in (0, 1 ms], 40 in (1, 2 ms], 10 in (4, 8 ms].
	after := []uint64{60, 100, 100, 110}
	q := func(x float64) float64 {
		t.Helper()
		v := quantileMs(bounds, before, after, 10, 110, x)
		require.NotNil(t, v)
		return *v
	}
	require.InDelta(t, 1.0, q(0.5), 1e-9)  // the 50th of 100 ends the first bucket
	require.InDelta(t, 0.5, q(0.25), 1e-9) // half way into the first
	require.InDelta(t, 1.5, q(0.7), 1e-9)  // 20 of the second bucket's 40
	require.InDelta(t, 7.6, q(0.99), 1e-9) // 9 of the last bucket's 10, past 4 ms
	require.Nil(t, quantileMs(bounds, after, after, 110, 110, 0.5), "nothing gained")
	// Observations past the last bound count as the last bound.
	require.InDelta(t, 8.0, *quantileMs(bounds, before, before, 10, 20, 0.5), 1e-9)
}

func TestAppendKept(t *testing.T) {
	var s []int
	for i := range 10 {
		s = appendKept(s, i, 4)
	}
	require.Equal(t, []int{6, 7, 8, 9}, s)
}

// TestPending: until the node opens, the page is served and the API
// answers 503 in JSON.
func TestPending(t *testing.T) {
	h := Pending(func() http.Handler { return nil })
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/overview", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.JSONEq(t, `{"api":1,"error":"the node has not opened yet (loading its data directory, or joining)"}`, rec.Body.String())
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusFound, rec.Code)
	require.Equal(t, "/dashboard/", rec.Header().Get("Location"))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/dashboard/", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), "<html")
}
