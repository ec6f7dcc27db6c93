package main

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// TestKubernetesManifests (issue 19) checks deploy/kubernetes/fero.yaml
// offline. Each document decodes strictly into its Kubernetes API type
// (an unknown or misspelt field fails). The server's arguments parse with
// this fero serve's own flags. And the pieces agree with each other: the
// --dns name is the headless Service's gossip SRV name, the Service
// publishes pods that are not ready (a server is ready only once it sees
// a quorum, which it cannot before it has found the others), pods start
// in parallel, the probes ask /readyz and /healthz on the --http port, the
// data directory and the secret file are mounted, and the disruption
// budget keeps a quorum. (kubeconform fetches its schemas from GitHub,
// which CI machines here cannot reach; the typed decoding is the offline
// check.)
func TestKubernetesManifests(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubernetes/fero.yaml")
	require.NoError(t, err)
	var (
		services []corev1.Service
		sets     []appsv1.StatefulSet
		pdbs     []policyv1.PodDisruptionBudget
		policies []networkingv1.NetworkPolicy
	)
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &head))
		switch head.Kind {
		case "":
			continue // comments only
		case "Service":
			var s corev1.Service
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &s))
			require.Equal(t, "v1", head.APIVersion)
			services = append(services, s)
		case "StatefulSet":
			var s appsv1.StatefulSet
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &s))
			require.Equal(t, "apps/v1", head.APIVersion)
			sets = append(sets, s)
		case "PodDisruptionBudget":
			var p policyv1.PodDisruptionBudget
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &p))
			require.Equal(t, "policy/v1", head.APIVersion)
			pdbs = append(pdbs, p)
		case "NetworkPolicy":
			var p networkingv1.NetworkPolicy
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &p))
			require.Equal(t, "networking.k8s.io/v1", head.APIVersion)
			policies = append(policies, p)
		default:
			t.Fatalf("unexpected kind %q", head.Kind)
		}
	}
	require.Len(t, sets, 1)
	require.Len(t, pdbs, 1)
	ss := sets[0]
	var headless *corev1.Service
	for i := range services {
		if services[i].Name == ss.Spec.ServiceName {
			headless = &services[i]
		}
	}
	require.NotNil(t, headless, "the StatefulSet's serviceName names a Service")
	require.Equal(t, corev1.ClusterIPNone, headless.Spec.ClusterIP)
	require.True(t, headless.Spec.PublishNotReadyAddresses, "servers must find peers that are not ready yet")
	require.Equal(t, appsv1.ParallelPodManagement, ss.Spec.PodManagementPolicy, "an ordered start waits for a ready first pod, which needs a quorum")

	require.Len(t, ss.Spec.Template.Spec.Containers, 1)
	c := ss.Spec.Template.Spec.Containers[0]
	require.GreaterOrEqual(t, len(c.Args), 2)
	require.Equal(t, "serve", c.Args[0])
	// The arguments, with the downward API's values filled in, parse as
	// this fero serve's flags.
	args := strings.NewReplacer("$(POD_NAME)", "fero-0", "$(POD_NAMESPACE)", "default", "$(POD_IP)", "10.0.0.5").Replace(strings.Join(c.Args[1:], "\x00"))
	cmd := newServe()
	require.NoError(t, cmd.ParseFlags(strings.Split(args, "\x00")), "the manifest's flags")
	flag := func(name string) string { return cmd.Flags().Lookup(name).Value.String() }
	for _, env := range []string{"POD_NAME", "POD_NAMESPACE", "POD_IP"} {
		found := false
		for _, e := range c.Env {
			if e.Name == env && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				found = true
			}
		}
		require.True(t, found, "env %s from the downward API", env)
	}

	var gossip *corev1.ServicePort
	for i, p := range headless.Spec.Ports {
		if p.Name == "gossip" && p.Protocol == corev1.ProtocolTCP {
			gossip = &headless.Spec.Ports[i]
		}
	}
	require.NotNil(t, gossip, "the headless Service has a TCP port named gossip")
	require.Equal(t, "_gossip._tcp."+headless.Name+".default.svc.cluster.local", flag("dns"), "--dns is the headless Service's SRV name")
	require.True(t, strings.HasSuffix(flag("bind"), ":7946") && gossip.Port == 7946, "gossip on the port the SRV records give")
	require.NotEmpty(t, flag("cluster-secret-file"), "beyond loopback, a server needs the cluster secret")
	require.Equal(t, fmt.Sprint(*ss.Spec.Replicas), flag("expect"), "a new cluster forms once all the replicas see each other (--expect)")

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	require.True(t, strings.HasSuffix(flag("http"), ":9400") && ports["http"] == 9400, "--http on the port named http")
	require.True(t, strings.HasSuffix(flag("listen"), ":7400") && ports["data"] == 7400)
	require.NotNil(t, c.ReadinessProbe)
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "http", c.ReadinessProbe.HTTPGet.Port.String())
	require.NotNil(t, c.LivenessProbe)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)

	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	require.Len(t, ss.Spec.VolumeClaimTemplates, 1)
	claim := ss.Spec.VolumeClaimTemplates[0].Name
	require.Equal(t, flag("data-dir"), mounts[claim], "--data-dir is the claimed volume")
	// Each file a flag names is in a mounted Secret volume.
	secretMounts := map[string]string{} // mount path → the Secret's name
	for _, v := range ss.Spec.Template.Spec.Volumes {
		if v.Secret != nil && mounts[v.Name] != "" {
			secretMounts[mounts[v.Name]] = v.Secret.SecretName
		}
	}
	for _, f := range []string{"cluster-secret-file", "tls-cert", "tls-key", "tls-ca"} {
		require.NotEmpty(t, flag(f), "--%s", f)
		require.NotEmpty(t, secretMounts[path.Dir(flag(f))], "--%s %s is in a mounted Secret", f, flag(f))
	}

	replicas := int(*ss.Spec.Replicas)
	pdb := pdbs[0]
	require.NotNil(t, pdb.Spec.MaxUnavailable)
	require.LessOrEqual(t, pdb.Spec.MaxUnavailable.IntValue(), replicas-(replicas/2+1), "the disruption budget keeps a quorum")
	require.Equal(t, ss.Spec.Selector.MatchLabels, pdb.Spec.Selector.MatchLabels)

	// Issue 43: an operator's findings.
	// The admin API answers without a credential: no Service that is not
	// the headless one publishes the http port.
	for _, svc := range services {
		if svc.Name == headless.Name {
			continue
		}
		for _, p := range svc.Spec.Ports {
			require.NotEqual(t, int32(9400), p.Port, "Service %s publishes the http port (the unauthenticated admin API)", svc.Name)
			require.NotEqual(t, "http", p.TargetPort.String(), "Service %s publishes the http port", svc.Name)
		}
	}
	// One server per node: a DoNotSchedule spread over hostnames.
	spread := false
	for _, c := range ss.Spec.Template.Spec.TopologySpreadConstraints {
		if c.TopologyKey == "kubernetes.io/hostname" && c.MaxSkew == 1 && c.WhenUnsatisfiable == corev1.DoNotSchedule {
			require.Equal(t, ss.Spec.Selector.MatchLabels, c.LabelSelector.MatchLabels, "the spread counts fero's pods")
			spread = true
		}
	}
	require.True(t, spread, "the pods spread one per node")
	// GOMEMLIMIT from the container's memory limit.
	var memlimit *corev1.EnvVar
	for i, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			memlimit = &c.Env[i]
		}
	}
	require.NotNil(t, memlimit, "GOMEMLIMIT is set")
	require.NotNil(t, memlimit.ValueFrom, "GOMEMLIMIT from the limit")
	require.NotNil(t, memlimit.ValueFrom.ResourceFieldRef)
	require.Equal(t, "limits.memory", memlimit.ValueFrom.ResourceFieldRef.Resource)
	require.False(t, c.Resources.Limits.Memory().IsZero(), "a memory limit for GOMEMLIMIT to follow")
	// The NetworkPolicy: data from anyone, gossip from the servers only,
	// http from scrapers only.
	require.Len(t, policies, 1)
	np := policies[0]
	require.Equal(t, ss.Spec.Selector.MatchLabels, np.Spec.PodSelector.MatchLabels)
	from := map[int32][]networkingv1.NetworkPolicyPeer{}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			from[p.Port.IntVal] = append(from[p.Port.IntVal], rule.From...)
		}
	}
	require.Contains(t, from, int32(7400))
	require.Empty(t, from[7400], "the data port is open to clients")
	require.NotEmpty(t, from[7946], "gossip only from listed peers")
	for _, peer := range from[7946] {
		require.Equal(t, ss.Spec.Selector.MatchLabels, peer.PodSelector.MatchLabels, "gossip from the servers")
		require.Nil(t, peer.NamespaceSelector)
	}
	require.NotEmpty(t, from[9400], "http only from listed peers")
	for _, peer := range from[9400] {
		require.Equal(t, "true", peer.PodSelector.MatchLabels["fero.dev/scrape"])
	}
}

// TestKubernetesSchema validates deploy/kubernetes/fero.yaml against the
// Kubernetes API's own OpenAPI schemas with kubernetes-validate (PyPI), in
// strict mode (an unknown field fails), and checks that the validator
// refuses a manifest with a field of the wrong type, so a validator that
// passes everything cannot pass this test. .ci/run installs it and sets
// FERO_KUBERNETES_VALIDATE; elsewhere it is looked for on PATH, and the
// test skips, saying so, where it is not found.
func TestKubernetesSchema(t *testing.T) {
	bin := os.Getenv("FERO_KUBERNETES_VALIDATE")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("kubernetes-validate"); err != nil {
			t.Skip("kubernetes-validate not found (pip install kubernetes-validate, or set FERO_KUBERNETES_VALIDATE); TestKubernetesManifests still checks the manifests by their Go types")
		}
	}
	out, err := exec.Command(bin, "--strict", "--kubernetes-version", "1.34.0", "../../deploy/kubernetes/fero.yaml").CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("%s", out)
	require.Contains(t, string(out), "statefulset/fero")

	b, err := os.ReadFile("../../deploy/kubernetes/fero.yaml")
	require.NoError(t, err)
	bad := strings.Replace(string(b), "podManagementPolicy: Parallel", "podManagementPolicy: Parallel\n  minReadySeconds: soon", 1)
	require.NotEqual(t, string(b), bad, "the manifest has the line the negative check changes")
	badPath := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(badPath, []byte(bad), 0o644))
	out, err = exec.Command(bin, "--strict", "--kubernetes-version", "1.34.0", badPath).CombinedOutput()
	require.Error(t, err, "the validator must refuse a string where an integer goes: %s", out)
	require.Contains(t, string(out), "minReadySeconds")
}
