package command

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The demo runs the payments service under faults: zero duplicates, zero
// lost; the database it leaves lists its keys.
func TestDemo(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "demo.db")
	out, stderr, code := run("demo", "--ops", "40", "--clients", "4", "--db", db, "--seed", "3", "--json")
	require.Equal(t, 0, code, stderr)
	// stdout is one JSON document; progress went to stderr (issue 13, item 13).
	var res demoResult
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Contains(t, stderr, "payments done")
	require.Equal(t, 40, res.Operations)
	require.Zero(t, res.Duplicates)
	require.Zero(t, res.Lost)
	require.Equal(t, 40, res.ProviderCharges)
	require.Greater(t, res.Attempts, int64(80))

	keys, _, code := run("keys", "--db", db, "--scope", "acme|POST /v1/orders", "--json")
	require.Equal(t, 0, code)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(keys), &list))
	require.Len(t, list, 80, "40 creates and 40 pays")
	_, _, code = run("check", "--db", db)
	require.Equal(t, 0, code)
}

// demo --key-file: the same run, encrypted at rest; the file checks clean
// with the key, and a tool without it lists every key as sealed.
func TestDemoEncrypted(t *testing.T) {
	t.Parallel()
	key := keyFile(t, "7")
	db := filepath.Join(t.TempDir(), "demo.db")
	out, stderr, code := run("demo", "--ops", "30", "--clients", "4", "--db", db, "--seed", "5", "--key-file", key, "--json")
	require.Equal(t, 0, code, stderr)
	var res demoResult
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Zero(t, res.Duplicates)
	require.Zero(t, res.Lost)
	require.Equal(t, "key id 7", res.Encrypted)
	keys, _, code := run("keys", "--db", db, "--scope", "acme|POST /v1/orders", "--json")
	require.Equal(t, 0, code)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(keys), &list))
	require.Len(t, list, 60)
	for _, k := range list {
		if k["status"] == "completed" {
			require.Equal(t, "key id 7", k["encrypted"])
		}
	}
	_, _, code = run("check", "--db", db, "--key-file", key)
	require.Equal(t, 0, code)
}

// demo --replicas 3: three replicas behind a load balancer on an embedded
// three-member etcd cluster whose leader is killed mid-run and comes back;
// zero duplicates, zero lost.
func TestDemoReplicas(t *testing.T) {
	t.Parallel()
	out, stderr, code := run("demo", "--replicas", "3", "--ops", "60", "--clients", "6", "--seed", "2", "--json")
	require.Equal(t, 0, code, stderr)
	var res demoResult
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Equal(t, 3, res.Replicas)
	require.Zero(t, res.Duplicates)
	require.Zero(t, res.Lost)
	require.Equal(t, 60, res.ProviderCharges)
	require.Len(t, res.Faults, 2, "the leader was killed, then restarted")
	require.Contains(t, res.Faults[0], "killed")
	require.Contains(t, res.Faults[1], "restarted")
	require.Contains(t, res.DB, "etcd")

	_, stderr, code = run("demo", "--replicas", "3", "--db", filepath.Join(t.TempDir(), "x.db"))
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "the state is on etcd")
}

// The demo's clients count their payments at once, into a writer that is
// not safe for concurrent use (this buffer, like the tests' stderr): the
// progress lines come whole and in order, and the race detector sees no
// race (found by CI: TestDemoEncrypted raced on its stderr buffer).
func TestProgressFromManyClients(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(newDiag(&buf), 1000)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 125 {
				p.add()
			}
		})
	}
	wg.Wait()
	p.finish()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 10, buf.String())
	for i, l := range lines {
		require.Equal(t, fmt.Sprintf("%d/1000 payments done", (i+1)*100), l)
	}
}
