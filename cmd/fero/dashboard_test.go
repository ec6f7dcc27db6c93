package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// findChromium returns the path of a Chromium or Chrome on PATH, or "".
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// dashState is what the dashboard page shows, as the test reads it from
// the page's ids and data attributes.
type dashState struct {
	Members    int               `json:"members"`    // #member-count
	Statuses   map[string]string `json:"statuses"`   // tr[data-member] → data-status
	Partitions int               `json:"partitions"` // #partition-count
	Cells      int               `json:"cells"`      // .cell elements
	Owned      int               `json:"owned"`      // cells with an owner
	Ready      string            `json:"ready"`      // #ready's data-ready
	Banner     string            `json:"banner"`     // the banner's text, "" while hidden
	Updates    int               `json:"updates"`    // polls that drew every part
	Events     []string          `json:"events"`     // "member status", newest first
	Errors     []string          `json:"errors"`     // tr[data-code] of the failed writes' panel
}

const dashStateJS = `(() => {
	const text = id => (document.getElementById(id) || {}).textContent || "";
	const statuses = {};
	for (const r of document.querySelectorAll("tr[data-member]")) statuses[r.dataset.member] = r.dataset.status;
	const cells = document.querySelectorAll(".cell");
	const banner = document.getElementById("banner");
	return {
		members: parseInt(text("member-count"), 10) || 0,
		statuses: statuses,
		partitions: parseInt(text("partition-count"), 10) || 0,
		cells: cells.length,
		owned: Array.from(cells).filter(c => c.dataset.owner).length,
		ready: (document.getElementById("ready") || {dataset: {}}).dataset.ready || "",
		banner: banner && !banner.hidden ? banner.textContent.trim() : "",
		updates: parseInt(document.body.dataset.updates || "0", 10),
		events: Array.from(document.querySelectorAll("li.event")).map(e => e.dataset.member + " " + e.dataset.status),
		errors: Array.from(document.querySelectorAll("tr[data-code]")).map(r => r.dataset.code),
	};
})()`

// TestDashboardInBrowser: three `fero serve --http` processes; a headless
// Chromium opens the first one's /dashboard/, which shows the three
// members connected and the 271 partitions of the ring, owned, with no
// console error or uncaught exception. Some writes give the charts data
// before a screenshot (docs/dashboard.png with FERO_DASHBOARD_SCREENSHOT=1).
// Then the third process is killed, and the page shows it dead once
// failure detection declares it so.
func TestDashboardInBrowser(t *testing.T) {
	browser := findChromium()
	if browser == "" {
		t.Skip("no Chromium on PATH (chromium, chromium-browser or google-chrome); apt-get install chromium to run this test")
	}

	ids := []string{"d1", "d2", "d3"}
	var ss []*server
	var web []string
	for i, id := range ids {
		args := []string{"kv", "--id", id, "--http", "127.0.0.1:0", "--log-level", "error"}
		if i > 0 {
			args = append(args, "--seeds", ss[0].gossip)
		}
		s := serve(t, args...)
		ss = append(ss, s)
		web = append(web, httpAddr(t, s))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.NoSandbox, // tests run as root in CI
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()

	// Every console.error and uncaught exception of the page fails the test.
	var mu sync.Mutex
	var pageErrors []string
	require.NoError(t, chromedp.Listen(bctx, func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type != runtime.ConsoleAPICalledTypeError {
				return
			}
			var args []string
			for _, a := range e.Args {
				if a.Description != "" {
					args = append(args, a.Description)
				} else {
					args = append(args, string(a.Value))
				}
			}
			msg = "console.error: " + strings.Join(args, " ")
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			msg = "uncaught: " + d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg += " " + d.Exception.Description
			}
		default:
			return
		}
		mu.Lock()
		pageErrors = append(pageErrors, msg)
		mu.Unlock()
	}))
	noPageErrors := func() {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, pageErrors, "the page logged errors")
	}

	// waitPage polls the page until cond holds of what it shows.
	waitPage := func(what string, timeout time.Duration, cond func(dashState) bool) dashState {
		t.Helper()
		deadline := time.Now().Add(timeout)
		var st dashState
		for {
			var err error
			st, err = chromedp.Run(bctx, chromedp.Evaluate[dashState](dashStateJS))
			require.NoError(t, err, "reading the page")
			if cond(st) {
				return st
			}
			if time.Now().After(deadline) {
				noPageErrors()
				b, _ := json.Marshal(st)
				t.Fatalf("the page did not show %s within %v; it shows %s", what, timeout, b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	url := "http://" + web[0] + "/dashboard/"
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(url)))
	start := time.Now()
	formed := waitPage("3 members connected and 271 partitions owned", 30*time.Second, func(st dashState) bool {
		if st.Members != 3 || len(st.Statuses) != 3 || st.Partitions != 271 || st.Cells != 271 || st.Owned != 271 || st.Ready != "true" {
			return false
		}
		for _, id := range ids {
			if st.Statuses[id] != "connected" {
				return false
			}
		}
		return true
	})
	require.Empty(t, formed.Banner, "the banner")
	t.Logf("the page showed the cluster formed %v after it opened", time.Since(start).Round(time.Millisecond))
	noPageErrors()

	// Writes through each node, spread over a few seconds, so that the
	// charts have something to show.
	const puts = 200
	pace := time.NewTicker(20 * time.Millisecond)
	defer pace.Stop()
	loadStart := time.Now()
	for i := range puts {
		<-pace.C
		addr := ss[i%len(ss)].data
		require.NoError(t, retryUnavailable(ctx, func() error {
			_, err := run(ctx, "put", "--addr", addr, fmt.Sprintf("key%d", i), fmt.Sprintf(`{"n":%d}`, i))
			return err
		}), "put %d", i)
	}
	loadEnd := time.Now()
	t.Logf("%d puts in %v", puts, loadEnd.Sub(loadStart).Round(time.Millisecond))
	// The node samples once a second: wait for a sample past the load,
	// then for the page to draw it.
	hc := &http.Client{Timeout: 5 * time.Second}
	require.Eventually(t, func() bool {
		resp, err := hc.Get("http://" + web[0] + "/api/v1/series")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var series struct {
			Samples []struct {
				T int64 `json:"t"`
			} `json:"samples"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&series) != nil || len(series.Samples) == 0 {
			return false
		}
		return series.Samples[len(series.Samples)-1].T > loadEnd.UnixMilli()
	}, 10*time.Second, 100*time.Millisecond, "no sample after the load in /api/v1/series")
	drawn := waitPage("a fresh draw", 10*time.Second, func(dashState) bool { return true }).Updates
	waitPage("a fresh draw", 10*time.Second, func(st dashState) bool { return st.Updates >= drawn+2 })

	// Refused writes (ADD of keys that exist) show in the errors panel by
	// code, apart from the writes (issue 43). A remote client sends each
	// to its key's owner, where it is counted: 30 keys reach every node.
	require.Empty(t, waitPage("a draw", 10*time.Second, func(dashState) bool { return true }).Errors, "no error before")
	for i := range 30 {
		_, err := run(ctx, "put", "--add", "--addr", ss[i%len(ss)].data, fmt.Sprintf("key%d", i), "1")
		require.ErrorContains(t, err, "failed_precondition", "ADD of key%d, which exists", i)
	}
	waitPage("the refused writes in the errors panel", 10*time.Second, func(st dashState) bool {
		return slices.Equal(st.Errors, []string{"failed_precondition"})
	})

	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	require.NoError(t, err, "screenshot")
	png := filepath.Join(t.TempDir(), "dashboard.png")
	if os.Getenv("FERO_DASHBOARD_SCREENSHOT") == "1" {
		png = filepath.Join("..", "..", "docs", "dashboard.png")
	}
	require.NoError(t, os.WriteFile(png, shot, 0o644))
	t.Logf("screenshot: %s (%d bytes)", png, len(shot))
	noPageErrors()

	// Kill the third server; the page shows it dead.
	dead := ids[2]
	killed := time.Now()
	require.NoError(t, ss[2].cmd.Process.Kill())
	_ = ss[2].cmd.Wait()
	// docs/admin-api.md: members[] keeps a dead member, with its status.
	st := waitPage("the row of "+dead+" with data-status=dead", 30*time.Second, func(st dashState) bool { return st.Statuses[dead] == "dead" })
	t.Logf("the page showed %s dead %v after the kill", dead, time.Since(killed).Round(time.Millisecond))
	require.Equal(t, "connected", st.Statuses[ids[0]])
	require.Equal(t, "connected", st.Statuses[ids[1]])
	require.Empty(t, st.Banner, "the banner: the node the page reads is up")
	waitPage("the event of "+dead+"'s death", 10*time.Second, func(st dashState) bool {
		return slices.Contains(st.Events, dead+" dead")
	})
	noPageErrors()
}
