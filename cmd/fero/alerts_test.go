package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestAlertRules (issue 43): deploy/prometheus/fero-alerts.yaml is
// well formed, every rule has a severity and a summary, and every metric
// its expressions read is one a server exports: a server with a data
// directory and --http that took a write and refused one is scraped, and
// each fero_* name in the rules must be among its series (a renamed
// metric would leave an alert that never fires). With promtool on PATH
// the rules also pass `promtool check rules`.
func TestAlertRules(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "prometheus", "fero-alerts.yaml")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	require.NoError(t, yaml.UnmarshalStrict(b, &file))
	require.NotEmpty(t, file.Groups)

	s := serve(t, "kv", "--data-dir", t.TempDir(), "--http", "127.0.0.1:0", "--log-level", "error", "--partitions", "31")
	web := httpAddr(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.Eventually(t, func() bool {
		_, err := run(ctx, "put", "--addr", s.data, "k", "1")
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)
	_, err = run(ctx, "put", "--add", "--addr", s.data, "k", "2")
	require.ErrorContains(t, err, "failed_precondition")
	exported := scrape(t, web)

	metric := regexp.MustCompile(`\bfero_[a-z_]+\b`)
	alerts := map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "group %s: a rule without a name", g.Name)
			require.False(t, alerts[r.Alert], "alert %s twice", r.Alert)
			alerts[r.Alert] = true
			require.NotEmpty(t, r.Expr, r.Alert)
			require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], "%s: severity", r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], "%s: summary", r.Alert)
			names := metric.FindAllString(r.Expr, -1)
			require.NotEmpty(t, names, "%s reads no fero metric", r.Alert)
			for _, name := range names {
				_, ok := exported[name]
				require.True(t, ok, "%s reads %s, which a server does not export", r.Alert, name)
			}
		}
	}
	for _, want := range []string{"FeroServerNotAlive", "FeroNoQuorum", "FeroDiskFailed"} {
		require.True(t, alerts[want], "the rules have %s", want)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		out, err := exec.CommandContext(ctx, promtool, "check", "rules", path).CombinedOutput()
		require.NoError(t, err, "promtool check rules: %s", out)
	} else {
		t.Log("no promtool on PATH: the rules' PromQL is not checked here")
	}
}
