package main

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
)

// browser starts a headless Chromium from the distribution's package
// (.ci/run installs it). Without one the test is skipped, unless
// ONCEKV_REQUIRE_BROWSER is set (CI), where that is a failure.
func browser(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("ONCEKV_REQUIRE_BROWSER") != "" {
			t.Fatal("no Chromium: install it (apt-get install chromium) or unset ONCEKV_REQUIRE_BROWSER")
		}
		t.Skip("no Chromium installed (apt-get install chromium): the console's browser test is skipped")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Headless,
		chromedp.WindowSize(1100, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancelTimeout)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")))
	return ctx
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	require.NoError(t, err)
	return v
}

// shoot saves a screenshot of the current page into $ONCEKV_SCREENSHOTS
// (docs/ when refreshing the README's pictures), if set.
func shoot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("ONCEKV_SCREENSHOTS")
	if dir == "" {
		return
	}
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), buf, 0o600))
}

// The web console in a real browser, against the payments service under
// load: the overview's counts match what `oncekv stats --addr` reports (the
// admin endpoint's /stats), a parked payment appears among the intents,
// requeued through the page it is executed by the reconciler and leaves the
// list; without the token the page offers no action and a posted one is
// refused.
func TestConsoleInABrowser(t *testing.T) {
	ctx := browser(t)
	dir := t.TempDir()
	const tok = "console-test-token"
	// Every process listens on a port of its own choosing and says which:
	// a port picked here and bound later by the child can be taken in
	// between (it was, once, by an outgoing connection).
	prov := start(t, "provider", "-addr", "127.0.0.1:0", "-db", dir+"/provider.db", "-fail-rate", "1")
	paddr := strings.TrimPrefix(prov.url, "http://") // the provider comes back on it below
	svc := start(t, "payments", "-addr", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-admin-token", tok, "-db", dir+"/payments.db", "-provider", prov.url,
		"-max-attempts", "1", "-call-timeout", "2s")
	admin := strings.TrimPrefix(svc.url, "http://") // the admin endpoint announces itself first
	_, rest, _ := strings.Cut(svc.waitLine(t, "payments listening on "), "listening on ")
	api, console := strings.Fields(rest)[0], "http://"+admin+inspect.ConsolePath
	for i := 0; ; i++ { // the admin endpoint announced itself first: wait for the API
		if _, err := try("GET", api+"/v1/orders/none", acme, "", ""); err == nil {
			break
		}
		require.Less(t, i, 500, "the API did not come up")
		time.Sleep(10 * time.Millisecond)
	}

	// A payment the provider refuses: parked after its one attempt.
	o := do(t, "POST", api+"/v1/orders", acme, "console-1", orderBody("ext-console", 4200, "t"))
	require.Equal(t, 201, o.Status)
	id := o.json(t)["id"].(string)
	require.Equal(t, 502, do(t, "POST", api+"/v1/orders/"+id+"/pay", acme, "console-pay-1", "").Status)

	// Load: orders keep coming while the console is used.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var created atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ref := "load-" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				if r, err := try("POST", api+"/v1/orders", acme, ref, orderBody(ref, 100, "t")); err == nil && r.Status == 201 {
					created.Add(1)
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	for created.Load() < 20 {
		time.Sleep(10 * time.Millisecond)
	}

	// The overview against the admin endpoint's stats (what `oncekv stats
	// --addr --json` prints), read before and after the page: under load the
	// page's counts lie between the two.
	stats := &inspect.Client{BaseURL: "http://" + admin, Token: tok}
	before, err := stats.Stats(context.Background())
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(console)))
	page := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll('[data-count]')].map(e => [e.dataset.count, e.textContent]))`)
	after, err := stats.Stats(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, page)
	for name, v := range page {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, name)
		require.GreaterOrEqual(t, n, before.Counts[name], name)
		require.LessOrEqual(t, n, after.Counts[name], name)
	}
	require.Equal(t, "1", page["intent.needs_attention"])
	require.Equal(t, "1", eval[string](t, ctx, `document.getElementById('attention').textContent`))

	// The parked payment, listed; without the token no action is offered.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(console+"intents?state=needs_attention")))
	rows := eval[[]string](t, ctx, `[...document.querySelectorAll('#intents tbody tr[data-id]')].map(r => r.textContent)`)
	require.Len(t, rows, 1)
	require.Contains(t, rows[0], "order/"+id)
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('form[action$="intents/requeue"]').length`))
	resp, err := http.PostForm(console+"intents/requeue", url.Values{"id": {"x"}}) //nolint:gosec // loopback test server
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "an action without the token is refused")

	// A wrong token is refused; the right one logs in.
	login := func(token, landing string) {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(console+"login"),
			chromedp.SendKeys(`input[name="token"]`, token), chromedp.Submit(`input[name="token"]`), chromedp.WaitVisible(landing)))
	}
	login("not-the-token", `.error`)
	require.Contains(t, eval[string](t, ctx, `document.body.textContent`), "That is not the admin token")
	login(tok, `#counts`)
	require.Contains(t, eval[string](t, ctx, `document.querySelector('.who').textContent`), "admin")
	shoot(t, ctx, "console-overview.png")

	// The provider is back; requeued through the page, the reconciler pays
	// the order and the intent leaves the list.
	prov.stop(t)
	prov = start(t, "provider", "-addr", paddr, "-db", dir+"/provider.db")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(console+"intents?state=needs_attention")))
	shoot(t, ctx, "console-intents.png")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`tr[data-id] form[action$="intents/requeue"] button`), chromedp.WaitVisible(`.flash`)))
	require.Contains(t, eval[string](t, ctx, `document.querySelector('.flash').textContent`), "Requeued")
	deadline := time.Now().Add(time.Minute)
	for {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(console+"intents?state=needs_attention")))
		if eval[int](t, ctx, `document.querySelectorAll('#intents tbody tr[data-id]').length`) == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the requeued intent was never executed")
		time.Sleep(200 * time.Millisecond)
	}
	// On a phone's width every page fits: nothing scrolls sideways but the
	// tables' own boxes.
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844)))
	for _, p := range []string{"keys", "intents", "outbox", "inbox", "login", ""} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(console+p)))
		require.True(t, eval[bool](t, ctx, `document.documentElement.scrollWidth <= window.innerWidth`), "page %q is wider than a phone", p)
	}
	shoot(t, ctx, "console-phone.png")

	paid := do(t, "GET", api+"/v1/orders/"+id, acme, "", "")
	require.Equal(t, "paid", paid.json(t)["status"])
	require.Len(t, charges(t, prov.url), 1)
	require.True(t, strings.HasPrefix(paid.json(t)["charge_id"].(string), "ch_"))
}
