package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/oncekv/oncekv/conditional"
	"github.com/oncekv/oncekv/fingerprint"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/retention"
	"github.com/oncekv/oncekv/seal"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest/httpprovider"
)

// DefaultAPIKeys is the -api-keys default.
const DefaultAPIKeys = "sk_test_acme=acme,sk_test_globex=globex" //nolint:gosec // the example's public test keys

// Config configures the service.
type Config struct {
	DBPath string // bbolt file (unless Backend is set)
	// Backend, if set, holds the service's state instead of the file at
	// DBPath: an etcd backend (etcdkv.Open) lets several replicas of the
	// service share one ledger. App.Close closes it.
	Backend     kv.Backend
	ProviderURL string            // the payment provider's base URL
	APIKeys     map[string]string // API key -> tenant
	Logger      *slog.Logger      // nil discards
	NoSync      bool              // for demos and benchmarks only
	// Provider overrides the HTTP provider client (tests).
	Provider sideeffect.Provider
	// Grace and Lease tune the reconciler; zero means 5s and 30s. Lease
	// is also how long another replica waits before it takes over a claim
	// whose replica died.
	Grace, Lease time.Duration
	// MaxAttempts is how many attempts without a definite answer park a
	// payment for an operator (needs_attention); zero means the
	// executor's default.
	MaxAttempts int
	// CallTimeout bounds one provider call; zero means 15s. A charge
	// intent's lease is Lease plus twice this.
	CallTimeout time.Duration
	// Webhook, if set, receives the outbox events (order.paid); otherwise
	// the relay logs them.
	Webhook string
	// SweepInterval is how often retention sweeps run. 0 means one minute.
	SweepInterval time.Duration
	// Clock drives every time decision (tests). nil means the wall clock.
	Clock kv.Clock
	// Observer receives what oncekv reports (package observe): main sets
	// the OpenTelemetry adapter behind /metrics.
	Observer *observe.Observer
	// Cipher, if set, encrypts what oncekv stores for the service (stored
	// responses, payment intents, outbox events) and the orders table's
	// rows (kv.Options.Cipher, package seal).
	Cipher *seal.Ring
}

// ParseAPIKeys parses "key=tenant,key=tenant". A key listed twice is an
// error (the second tenant would silently win), and so is a tenant the
// ledger cannot scope (empty, or holding '|' or a control character).
func ParseAPIKeys(s string) (map[string]string, error) {
	keys := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		k, t, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || k == "" || t == "" {
			return nil, fmt.Errorf("api key %q: want key=tenant", pair)
		}
		if prev, dup := keys[k]; dup {
			return nil, fmt.Errorf("api key %q is listed twice (tenants %q and %q)", k, prev, t)
		}
		if _, err := ledger.Scope(t, "POST", "/"); err != nil {
			return nil, fmt.Errorf("api key %q: tenant %q: %w", k, t, err)
		}
		keys[k] = t
	}
	return keys, nil
}

// Order is a stored order.
type Order struct {
	ID          string    `json:"id"`
	Tenant      string    `json:"tenant"`
	ExternalRef string    `json:"external_ref"`
	AmountCents int64     `json:"amount_cents"`
	Currency    string    `json:"currency"`
	Status      string    `json:"status"`
	ChargeID    string    `json:"charge_id,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// View is the order as the API shows it.
type View struct {
	ID          string `json:"id"`
	ExternalRef string `json:"external_ref"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	Status      string `json:"status"`
	Version     uint64 `json:"version"`
	ChargeID    string `json:"charge_id,omitempty"`
}

func view(r conditional.Row[Order]) View {
	o := r.Value
	return View{ID: o.ID, ExternalRef: o.ExternalRef, AmountCents: o.AmountCents, Currency: o.Currency, Status: o.Status, Version: r.Version, ChargeID: o.ChargeID}
}

// App is a running payments service.
type App struct {
	DB         *kv.DB
	Ledger     *ledger.Ledger
	Orders     *conditional.Table[Order]
	Executor   *sideeffect.Executor
	Outbox     *outbox.Outbox
	Middleware *idemhttp.Middleware
	Handler    http.Handler
	cfg        Config
	log        *slog.Logger
}

// New opens the database and builds the service.
func New(cfg Config) (*App, error) {
	if len(cfg.APIKeys) == 0 {
		keys, _ := ParseAPIKeys(DefaultAPIKeys)
		cfg.APIKeys = keys
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Grace == 0 {
		cfg.Grace = 5 * time.Second
	}
	if cfg.Lease == 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 15 * time.Second
	}
	opts := &kv.Options{NoSync: cfg.NoSync, Clock: cfg.Clock, Observer: cfg.Observer, Cipher: cfg.Cipher}
	var db *kv.DB
	var err error
	if cfg.Backend != nil {
		db, err = kv.New(cfg.Backend, opts)
	} else {
		db, err = kv.Open(cfg.DBPath, opts)
	}
	if err != nil {
		return nil, err
	}
	a := &App{DB: db, cfg: cfg, log: cfg.Logger}
	if err := a.build(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return a, nil
}

func (a *App) build() error {
	var err error
	// The pay path verifies with the provider after a takeover, so claims
	// left by a dead process are recovered at once.
	if a.Ledger, err = ledger.New(a.DB, &ledger.Config{Lease: a.cfg.Lease, RecoverOrphans: true}); err != nil {
		return err
	}
	a.Orders, err = conditional.NewTable(a.DB, "orders", &conditional.Options[Order]{Seal: a.cfg.Cipher != nil, Indexes: []conditional.Index[Order]{{
		Name: "by_ref",
		Key:  func(o Order) ([]byte, bool) { return conditional.Key(o.Tenant, o.ExternalRef), true },
	}}})
	if err != nil {
		return err
	}
	a.Outbox = outbox.New(a.DB)
	provider := a.cfg.Provider
	if provider == nil {
		provider = &httpprovider.Client{BaseURL: a.cfg.ProviderURL, HTTP: &http.Client{Timeout: 10 * time.Second}}
	}
	a.Executor, err = sideeffect.New(a.DB, &sideeffect.Config{
		Handlers: map[string]sideeffect.Handler{"charge": {
			Provider: provider, OnSucceeded: a.paid, OnFailed: a.paymentFailed,
		}},
		Grace: a.cfg.Grace, Lease: a.cfg.Lease + 2*a.cfg.CallTimeout, CallTimeout: a.cfg.CallTimeout, MaxAttempts: a.cfg.MaxAttempts,
		Backoff: sideeffect.Backoff{Base: time.Second, Cap: 30 * time.Second}, Logger: a.log,
	})
	if err != nil {
		return err
	}
	a.Middleware, err = idemhttp.New(&idemhttp.Config{
		Ledger:      a.Ledger,
		Tenant:      func(r *http.Request) (string, error) { return tenantOf(r.Context()) },
		Fingerprint: fingerprint.Options{Exclude: []string{"client_ts", "request_id"}},
		Executor:    a.Executor,
		Logger:      a.log,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", a.Middleware.Wrap(http.HandlerFunc(a.createOrder)))
	mux.Handle("POST /v1/orders/{id}/pay", a.Middleware.WrapExternal(http.HandlerFunc(a.pay)))
	mux.HandleFunc("GET /v1/orders/{id}", a.getOrder)
	top := http.NewServeMux()
	top.HandleFunc("GET /livez", a.live) // without an API key: the orchestrator's
	top.Handle("/", a.auth(mux))
	a.Handler = top
	return nil
}

// live answers a liveness check: 503 once the database refuses calls
// (closed, or after a commit whose sync failed: kv.ErrSyncFailed), so that
// the orchestrator restarts the service and the open reads what the disk
// holds.
func (a *App) live(w http.ResponseWriter, _ *http.Request) {
	if err := a.DB.Err(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// Run runs the background work until ctx ends: the reconciler (finishes
// interrupted payments by asking the provider), the outbox relay (publishes
// order.paid) and the retention sweeps.
func (a *App) Run(ctx context.Context) error {
	var pub outbox.Publisher = outbox.PublishFunc(func(_ context.Context, ev outbox.Event) error {
		a.log.Info("event published", "id", ev.ID, "topic", ev.Topic, "seq", ev.Seq)
		return nil
	})
	if a.cfg.Webhook != "" {
		pub = &outbox.WebhookPublisher{URL: a.cfg.Webhook}
	}
	relay, err := outbox.NewRelay(a.Outbox, &outbox.RelayConfig{Publisher: pub, Logger: a.log})
	if err != nil {
		return err
	}
	interval := a.cfg.SweepInterval
	if interval == 0 {
		interval = time.Minute
	}
	errs := make(chan error, 3)
	go func() { errs <- a.Executor.Run(ctx, nil) }()
	go func() { errs <- relay.Run(ctx, nil) }()
	go func() {
		errs <- retention.Run(ctx, a.DB, nil, interval, func(st retention.Stats, err error) {
			if err != nil {
				a.log.Error("retention sweep", "error", err)
			} else if n := st.Deleted(); n > 0 {
				a.log.Info("retention sweep", "deleted", n, "longest_tx", st.LongestTx())
			}
		}, ledger.RecordKind, sideeffect.RecordKind, outbox.RecordKind)
	}()
	var first error
	for range 3 {
		if err := <-errs; err != nil && !errors.Is(err, context.Canceled) && first == nil {
			first = err
		}
	}
	return first
}

// Close closes the database.
func (a *App) Close() error { return a.DB.Close() }

type tenantKey struct{}

func tenantOf(ctx context.Context) (string, error) {
	t, ok := ctx.Value(tenantKey{}).(string)
	if !ok {
		return "", errors.New("no tenant")
	}
	return t, nil
}

// auth resolves the tenant from the API key; every route requires one.
func (a *App) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		tenant, known := a.cfg.APIKeys[key]
		if !ok || !known {
			idemhttp.WriteProblem(w, idemhttp.Problem{Type: idemhttp.ProblemUnauthenticated, Title: "Unauthenticated",
				Status: http.StatusUnauthorized, Detail: "send Authorization: Bearer <api key>"}, 0)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func badRequest(w http.ResponseWriter, detail string) {
	idemhttp.WriteProblem(w, idemhttp.Problem{Type: idemhttp.ProblemInvalidBody, Title: "Invalid order", Status: http.StatusBadRequest, Detail: detail}, 0)
}

func notFound(w http.ResponseWriter) {
	idemhttp.WriteProblem(w, idemhttp.Problem{Type: idemhttp.ProblemBase + "not-found", Title: "Order not found", Status: http.StatusNotFound}, 0)
}

type createRequest struct {
	ExternalRef string `json:"external_ref"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	ClientTS    string `json:"client_ts"`
	RequestID   string `json:"request_id"`
}

// createOrder runs inside the ledger's transaction (in-transaction path).
func (a *App) createOrder(w http.ResponseWriter, r *http.Request) {
	tx, _ := idemhttp.Tx(r.Context())
	tenant, _ := tenantOf(r.Context())
	var in createRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		// Never echo the input: an unknown field's name may be a megabyte.
		badRequest(w, "body: want a JSON object with external_ref, amount_cents and currency (and optionally client_ts, request_id), nothing else")
		return
	}
	switch {
	case in.ExternalRef == "" || len(in.ExternalRef) > 128:
		badRequest(w, "external_ref: 1 to 128 characters required")
		return
	case in.AmountCents <= 0 || in.AmountCents > 100_000_000:
		badRequest(w, "amount_cents: a positive integer up to 100000000 required")
		return
	case len(in.Currency) != 3:
		badRequest(w, "currency: a three-letter code required")
		return
	}
	id := "ord_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:20]
	o := Order{ID: id, Tenant: tenant, ExternalRef: in.ExternalRef, AmountCents: in.AmountCents,
		Currency: strings.ToLower(in.Currency), Status: "pending", CreatedAt: a.DB.Clock().Now().UTC()}
	// Unique per (tenant, external_ref): a create under a new key for an
	// existing external_ref returns the existing order, never a second one.
	res, err := a.Orders.UpsertTx(tx, "by_ref", id, o, nil)
	if err != nil {
		a.log.Error("create order", "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
		w.Header().Set("Location", "/v1/orders/"+res.Row.ID)
	}
	writeJSON(w, status, view(res.Row))
}

// pay validates the order and hands the charge to the external path.
func (a *App) pay(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenantOf(r.Context())
	id := r.PathValue("id")
	row, err := a.Orders.Get(r.Context(), id)
	if err != nil || row.Value.Tenant != tenant {
		notFound(w)
		return
	}
	// The downstream key derives from the order's external reference, not
	// from the request's key nor from the order's ID: the provider is
	// charged at most once per order whatever the keys, and a payment
	// retried after a restore from a backup that predates the order (which
	// creates it again, under a new ID) reaches the provider with the same
	// key and gets the first charge back.
	spec := sideeffect.Spec{Kind: "charge", Subject: "order/" + id, Scope: tenant, Key: "ref/" + row.Value.ExternalRef, Purpose: "charge"}
	if st := row.Value.Status; st != "pending" {
		// A paid or declined order is answered from its charge intent while
		// that is retained (Perform replays its outcome). Once retention has
		// forgotten the intent, paying again would charge again: refuse.
		if _, err := a.Executor.Get(r.Context(), sideeffect.DownstreamKey(spec.Scope, spec.Key, spec.Purpose)); errors.Is(err, sideeffect.ErrNotFound) {
			idemhttp.WriteProblem(w, idemhttp.Problem{Type: idemhttp.ProblemBase + "order-not-payable", Title: "Order is not payable",
				Status: http.StatusConflict, Detail: "the order is " + st + "; only a pending order can be paid"}, 0)
			return
		}
	}
	payload, _ := json.Marshal(map[string]any{"amount_cents": row.Value.AmountCents, "currency": row.Value.Currency, "subject": "order/" + id})
	spec.Payload = payload
	idemhttp.Perform(w, r, spec, a.respondPay)
}

// respondPay renders the stored answer of a pay request from the order as
// the finishing transaction left it.
func (a *App) respondPay(tx kv.Tx, in *sideeffect.Intent) (ledger.Response, error) {
	id := strings.TrimPrefix(in.Subject, "order/")
	row, err := a.Orders.GetTx(tx, id)
	if err != nil {
		return ledger.Response{}, err
	}
	status := http.StatusOK
	if in.State == sideeffect.StateFailed {
		status = http.StatusPaymentRequired
	}
	body, _ := json.Marshal(view(row))
	return ledger.Response{Status: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: append(body, '\n')}, nil
}

// paid is the charge intent's completion: the order becomes paid and an
// order.paid event joins the outbox, in the transaction that records the
// provider's answer.
func (a *App) paid(tx kv.Tx, in *sideeffect.Intent) error {
	id := strings.TrimPrefix(in.Subject, "order/")
	var charge struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(in.Result, &charge) != nil || charge.ID == "" {
		charge.ID = string(in.Result) // a provider that answers with the bare charge ID
	}
	res, err := a.Orders.AssignFieldTx(tx, id, func(o *Order) { o.Status, o.ChargeID = "paid", charge.ID }, conditional.Cond{})
	if err != nil {
		return err
	}
	payload, _ := json.Marshal(view(res.Row))
	_, _, err = a.Outbox.AddTx(tx, outbox.Event{ID: "order.paid/" + id, Topic: "order.paid", Key: id, Payload: payload})
	return err
}

func (a *App) paymentFailed(tx kv.Tx, in *sideeffect.Intent) error {
	id := strings.TrimPrefix(in.Subject, "order/")
	_, err := a.Orders.AssignFieldTx(tx, id, func(o *Order) { o.Status = "payment_failed" }, conditional.Cond{})
	return err
}

func (a *App) getOrder(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenantOf(r.Context())
	row, err := a.Orders.Get(r.Context(), r.PathValue("id"))
	if err != nil || row.Value.Tenant != tenant {
		notFound(w) // another tenant's order does not exist for this caller
		return
	}
	writeJSON(w, http.StatusOK, view(row))
}
