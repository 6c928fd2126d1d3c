package idemhttp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/oncekv/oncekv/fingerprint"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
)

// HeaderKey is the request header that carries the idempotency key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed is set to "true" on responses replayed from the ledger.
const HeaderReplayed = "Idempotent-Replayed"

// DefaultMaxBodyBytes is the request body limit (1 MiB); larger bodies get 413.
const DefaultMaxBodyBytes = 1 << 20

// DefaultMaxStoredErrorBytes bounds the body of a 4xx answer that is
// stored for replay (4 KiB): a larger one is sent but not stored, so a
// client cannot grow the file with big error answers.
const DefaultMaxStoredErrorBytes = 4 << 10

// Config configures the middleware.
type Config struct {
	// Ledger stores the records. Required.
	Ledger *ledger.Ledger

	// Tenant returns the caller's tenant from the server's own
	// authentication (an API key, a session) — never from a client-supplied
	// header. An error answers 401. Required.
	Tenant func(r *http.Request) (string, error)

	// Methods that go through the ledger. nil means POST and PATCH. Other
	// methods pass straight to the handler.
	Methods []string

	// KeyOptional lets a request without Idempotency-Key through to the
	// handler, unprotected, instead of answering 400. On a Wrap route it
	// runs in a transaction of its own (a 5xx rolls its writes back), its
	// body read first and bounded by MaxBodyBytes, as a keyed request's.
	KeyOptional bool

	// Route names the endpoint in the scope. nil means the ServeMux pattern
	// (r.Pattern, without its method), or the URL path when there is none:
	// then a path that cannot be part of a scope (a NUL byte; over
	// ledger.MaxScopeLen with the tenant and method) is answered 400
	// (ProblemPathInvalid). A name Route returns that cannot is the
	// service's error: 500, logged. Name routes by their pattern (the
	// router's, say) so that a key's scope does not vary with the resource.
	// A key is found under its scope only: a route renamed by a deploy (a
	// pattern or a wildcard's name changed) starts a new key space, and a
	// retry sent across the deploy runs again, unless Route keeps the old
	// name.
	Route func(r *http.Request) string

	// MaxBodyBytes bounds the request body. 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64

	// Fingerprint configures request fingerprints: list fields that differ
	// between retries of the same request (client timestamps, request IDs).
	Fingerprint fingerprint.Options

	// KeepHeaders are response headers stored and replayed besides
	// Content-Type, Content-Encoding and Location (without the first two
	// the stored bytes could not be read as the answer they are). Set-Cookie
	// and Idempotent-Replayed are never stored. Trailers are sent after
	// the body of the first response and not stored; to replay one, keep
	// both "Trailer" and the trailer's name (a field set under
	// http.TrailerPrefix cannot be kept).
	KeepHeaders []string

	// Store decides which responses are stored for replay. nil stores every
	// status below 500; a response not stored is rolled back with the
	// handler's writes, so a retry runs again. Whatever Store says, a 4xx
	// answer is not stored when its handler wrote nothing (the request was
	// rejected before it did anything: Stripe's rule) or called DoNotStore,
	// or when its body exceeds MaxStoredErrorBytes.
	Store func(status int) bool

	// MaxStoredErrorBytes bounds the body of a stored 4xx answer. 0 means
	// DefaultMaxStoredErrorBytes.
	MaxStoredErrorBytes int

	// Wait makes a request that meets its own key in progress wait up to Wait
	// for the first attempt (in-process notification) instead of answering
	// 409 at once.
	Wait time.Duration

	// Executor performs the side effects of external routes (WrapExternal).
	Executor *sideeffect.Executor

	// Logger receives one line per request that hit the ledger. nil discards.
	Logger *slog.Logger

	// OnEvent, if set, is called once per request that hit the ledger, for
	// metrics. It is called on the request's goroutine before the answer
	// is written (as Stats counts it and the database's observer hears
	// it), so a client that has its answer finds it counted, whatever the
	// answer's size; keep it quick, as the answer waits for it.
	OnEvent func(Event)
}

// New validates cfg and returns the middleware. Config.Ledger and
// Config.Tenant are required, so a nil cfg fails with ErrInvalidConfig.
func New(cfg *Config) (*Middleware, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	fp, err := fingerprint.New(&c.Fingerprint)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	m := &Middleware{cfg: c, fp: fp, maxBody: c.MaxBodyBytes, maxResp: c.Ledger.Config().MaxResponseBytes,
		maxError: c.MaxStoredErrorBytes, log: c.Logger, methods: c.Methods}
	m.keep = []string{"Content-Type", "Content-Encoding", "Location"}
	for _, h := range c.KeepHeaders {
		h = http.CanonicalHeaderKey(h)
		if h != "Set-Cookie" && h != HeaderReplayed && !slices.Contains(m.keep, h) {
			m.keep = append(m.keep, h)
		}
	}
	return m, nil
}

func (c *Config) withDefaults() Config {
	var r Config
	if c != nil {
		r = *c
	}
	if r.MaxBodyBytes == 0 {
		r.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if r.MaxStoredErrorBytes == 0 {
		r.MaxStoredErrorBytes = DefaultMaxStoredErrorBytes
	}
	if r.Methods == nil {
		r.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	return r
}

func (c *Config) validate() error {
	switch {
	case c.Ledger == nil || c.Tenant == nil:
		return fmt.Errorf("%w: Config.Ledger and Config.Tenant are required", ErrInvalidConfig)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("%w: MaxBodyBytes %d is negative", ErrInvalidConfig, c.MaxBodyBytes)
	case c.MaxStoredErrorBytes < 0:
		return fmt.Errorf("%w: MaxStoredErrorBytes %d is negative", ErrInvalidConfig, c.MaxStoredErrorBytes)
	case c.Wait < 0:
		return fmt.Errorf("%w: Wait %s is negative", ErrInvalidConfig, c.Wait)
	}
	return nil
}

// ErrInvalidConfig is returned by New for a Config that fails validation.
var ErrInvalidConfig = errors.New("idemhttp: invalid config")
