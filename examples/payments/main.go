package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/examples/payments/app"
	"github.com/oncekv/oncekv/seal"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/observe"
	oncekvotel "github.com/oncekv/oncekv/otel"
	"github.com/oncekv/oncekv/sideeffect/providertest/httpprovider"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	dbPath := fs.String("db", "payments.db", "bbolt file")
	etcd := fs.String("etcd", "", "etcd endpoints, comma-separated (e.g. http://127.0.0.1:2379): keep the state in etcd instead of -db, so several replicas serve one ledger (give them one -provider)")
	etcdPrefix := fs.String("etcd-prefix", "/payments/", "the keys' prefix in etcd (one per service)")
	providerURL := fs.String("provider", "", "payment provider base URL (default: an in-process fake provider)")
	apiKeys := fs.String("api-keys", app.DefaultAPIKeys, "API keys: key=tenant,key=tenant")
	lease := fs.Duration("lease", 30*time.Second, "how long a claim (a request in progress) is held before another process or replica may take it over")
	callTimeout := fs.Duration("call-timeout", 15*time.Second, "bound on one provider call")
	maxAttempts := fs.Int("max-attempts", 0, "attempts without a definite answer before a payment is parked for an operator (0: the executor's default)")
	metrics := fs.Bool("metrics", true, "serve /metrics (Prometheus text format, from oncekv's OpenTelemetry instruments) beside the API")
	verbose := fs.Bool("v", false, "log every idempotent request")
	webhook := fs.String("webhook", "", "URL that receives the outbox events (default: log them)")
	admin := fs.String("admin", "", "serve the admin endpoint (oncekv --addr) on this address, e.g. 127.0.0.1:8081 (off by default); a non-loopback address needs -admin-token")
	adminToken := fs.String("admin-token", os.Getenv("ONCEKV_ADMIN_TOKEN"), "admin bearer token (default $ONCEKV_ADMIN_TOKEN): unlocks bodies, provider errors, /check and intent requeue/resolve")
	keyFiles := fs.String("key-file", "", "encrypt what oncekv stores with this key file (ID:HEX, from `oncekv keygen`), default $ONCEKV_KEY; after a comma, older key files still to be read: their values are moved to the new key in the background")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ring, older, err := loadKeys(*keyFiles)
	if err != nil {
		return err
	}
	keys, err := app.ParseAPIKeys(*apiKeys)
	if err != nil {
		return err
	}
	if *admin != "" {
		if err := inspect.ValidateAddr(*admin, *adminToken); err != nil {
			return err
		}
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if *providerURL == "" {
		url, closeProvider, err := startProvider(ctx, strings.TrimSuffix(*dbPath, filepath.Ext(*dbPath))+"-provider.db")
		if err != nil {
			return err
		}
		defer closeProvider()
		*providerURL = url
	}

	cfg := app.Config{DBPath: *dbPath, ProviderURL: *providerURL, APIKeys: keys, Logger: logger, Webhook: *webhook,
		Lease: *lease, CallTimeout: *callTimeout, MaxAttempts: *maxAttempts, Cipher: ring}
	var metricsHandler http.Handler
	var meters metric.MeterProvider
	if *metrics {
		obs, h, mp, shutdown, err := prometheusObserver()
		if err != nil {
			return err
		}
		defer shutdown()
		cfg.Observer, metricsHandler, meters = obs, h, mp
	}
	store := *dbPath
	if *etcd != "" {
		b, err := etcdkv.Open(*etcd, &etcdkv.Options{Prefix: *etcdPrefix})
		if err != nil {
			return err
		}
		cfg.Backend, store = b, "etcd "+*etcd+" prefix "+*etcdPrefix
	}
	a, err := app.New(cfg)
	if err != nil {
		if cfg.Backend != nil {
			_ = cfg.Backend.Close()
		}
		return err
	}
	defer func() { _ = a.Close() }()
	if meters != nil {
		reg, err := oncekvotel.ObserveLedger(a.Ledger, &oncekvotel.Options{MeterProvider: meters})
		if err != nil {
			return err
		}
		defer func() { _ = reg.Unregister() }()
	}
	wg.Go(func() {
		if err := a.Run(ctx); err != nil {
			logger.Error("background work stopped (reconciler, outbox relay, retention)", "error", err)
		}
	})
	if older {
		// Rotation: values under the older keys move to the current one in
		// short batches while the service serves.
		wg.Go(func() {
			n, err := inspect.Rekey(ctx, a.DB, inspect.RekeyOptions{})
			if err != nil {
				logger.Error("background rekey stopped (it resumes at the next start)", "error", err)
				return
			}
			fmt.Fprintf(out, "rekey: %d values moved to key id %d; the older keys can be retired\n", n, ring.Current())
		})
	}

	if *admin != "" {
		aln, err := net.Listen("tcp", *admin)
		if err != nil {
			return err
		}
		ah, err := inspect.Handler(a.DB, inspect.HandlerOptions{Token: *adminToken, Executor: a.Executor})
		if err != nil {
			return err
		}
		asrv := newServer(ah)
		wg.Go(func() { _ = asrv.Serve(aln) })
		defer func() { _ = asrv.Close() }()
		mode := "read-only, loopback only, sensitive fields redacted"
		if *adminToken != "" {
			mode = "the admin token unlocks bodies, /check and intent actions"
		}
		fmt.Fprintf(out, "admin listening on http://%s (%s)\n", aln.Addr(), mode)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	handler := a.Handler
	if metricsHandler != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metricsHandler)
		mux.Handle("/", a.Handler)
		handler = mux
	}
	srv := newServer(handler)
	enc := "in clear"
	if ring != nil {
		enc = fmt.Sprintf("encrypted with key id %d", ring.Current())
	}
	fmt.Fprintf(out, "payments listening on http://%s (db %s, %s, provider %s)\n", ln.Addr(), store, enc, *providerURL)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var failed error
	select {
	case err := <-errc:
		return err
	case <-a.DB.Done(): // a commit's sync failed: the database refuses every call
		failed = a.DB.Err() // exit, and let the supervisor restart us (the open reads what the disk holds)
	case <-ctx.Done():
	}
	fmt.Fprintln(out, "payments shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	cancel()
	if failed != nil {
		return fmt.Errorf("exiting, for a restart to reopen the database: %w", failed)
	}
	return nil
}

// loadKeys reads -key-file: the current key, then older ones after commas;
// or $ONCEKV_KEY ("ID:HEX"). It reports whether older keys were given.
func loadKeys(list string) (*seal.Ring, bool, error) {
	var files []string
	for f := range strings.SplitSeq(list, ",") {
		if f = strings.TrimSpace(f); f != "" {
			files = append(files, f)
		}
	}
	r, err := seal.LoadRing("ONCEKV_KEY", files...)
	if err != nil {
		return nil, false, fmt.Errorf("-key-file: %w", err)
	}
	return r, len(files) > 1, nil
}

// prometheusObserver returns oncekv's OpenTelemetry observer, read by a
// Prometheus exporter on a registry of its own, the /metrics handler that
// serves it, and its meter provider (for oncekvotel.ObserveLedger).
func prometheusObserver() (*observe.Observer, http.Handler, metric.MeterProvider, func(), error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	obs, err := oncekvotel.New(&oncekvotel.Options{MeterProvider: mp})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return obs, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), mp, func() { _ = mp.Shutdown(context.Background()) }, nil
}

// startProvider runs the fake provider in this process on a loopback port.
func startProvider(ctx context.Context, path string) (string, func(), error) {
	db, err := kv.Open(path, nil)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = db.Close()
		return "", nil, err
	}
	srv := newServer(httpprovider.New(db, httpprovider.Faults{}, 1).Handler())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	return "http://" + ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
		_ = db.Close()
	}, nil
}

// Server timeouts: a slow client (slowloris) cannot hold a connection or a
// handler for long.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 15 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
)

func newServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout}
}
