package command

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/internal/testlog"
	"github.com/oncekv/oncekv/kv"
)

// startConsole runs `oncekv console args...` until the test ends and
// returns the console's URL.
func startConsole(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &testlog.Buffer{}
	root := newRoot(out, io.Discard)
	root.SetArgs(append([]string{"console", "--listen", "127.0.0.1:0"}, args...))
	done := make(chan error, 1)
	go func() { done <- execute(ctx, root) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, rest, ok := strings.Cut(out.String(), "console listening on "); ok {
			return strings.Fields(rest)[0]
		}
		select {
		case err := <-done:
			t.Fatalf("console exited: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("the console did not start")
	return ""
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u) //nolint:gosec // a loopback test server
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// oncekv console serves a stopped file's console, read-only by default;
// --addr proxies a running service's.
func TestConsoleCommand(t *testing.T) {
	t.Parallel()
	path := fixture(t)
	u := startConsole(t, "--db", path)
	code, body := get(t, u)
	require.Equal(t, 200, code)
	require.Contains(t, body, "Overview")
	require.Contains(t, body, `data-count="intent.needs_attention">1<`)
	resp, err := http.Post(u+"intents/requeue", "application/x-www-form-urlencoded", strings.NewReader("id=x")) //nolint:gosec // loopback
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// A running service's console, through the proxy.
	db, err := kv.Open(fixture(t), nil)
	require.NoError(t, err)
	defer db.Close()
	h, err := inspect.Handler(db, inspect.HandlerOptions{})
	require.NoError(t, err)
	live := httptest.NewServer(h)
	defer live.Close()
	p := startConsole(t, "--addr", live.URL)
	code, body = get(t, p+"intents?state=needs_attention")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, "order/ord_2")

	_, stderr, code2 := run("console", "--db", path, "--addr", live.URL)
	require.Equal(t, 2, code2)
	require.Contains(t, stderr, "not two of them")
}
