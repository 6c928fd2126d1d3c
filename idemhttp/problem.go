package idemhttp

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"
)

// ProblemBase prefixes the stable type URI of every problem this middleware
// writes (RFC 9457). The suffixes are constants below; clients may switch
// on them.
const ProblemBase = "https://oncekv.dev/problems/"

// Problem types.
const (
	ProblemKeyMissing      = ProblemBase + "idempotency-key-missing"
	ProblemKeyInvalid      = ProblemBase + "idempotency-key-invalid"
	ProblemKeyReused       = ProblemBase + "idempotency-key-reused"
	ProblemInProgress      = ProblemBase + "request-in-progress"
	ProblemBodyTooLarge    = ProblemBase + "body-too-large"
	ProblemInvalidBody     = ProblemBase + "invalid-body"
	ProblemPathInvalid     = ProblemBase + "request-path-invalid" // the URL path, taken as the route, cannot be part of a scope
	ProblemUnauthenticated = ProblemBase + "unauthenticated"
	ProblemOutcomePending  = ProblemBase + "outcome-pending"
	ProblemQuota           = ProblemBase + "tenant-quota-exceeded"
	ProblemBackoff         = ProblemBase + "side-effect-backoff"
	ProblemNeedsAttention  = ProblemBase + "side-effect-needs-attention"
	ProblemInternal        = ProblemBase + "internal-error"
	ProblemUnavailable     = ProblemBase + "service-unavailable" // not finished: the database closed, or the request's deadline passed
)

// MaxProblemDetail bounds the detail of a problem WriteProblem writes.
const MaxProblemDetail = 512

// Problem is an RFC 9457 problem detail.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Extensions.
	RetryAfter int `json:"retry_after,omitempty"`
}

// WriteProblem writes p as application/problem+json. A positive retryAfter
// also sets the Retry-After header (whole seconds, rounded up).
//
// The detail is clipped to MaxProblemDetail bytes: a problem never echoes
// unbounded input (an unknown field's name, a tenant function's error).
func WriteProblem(w http.ResponseWriter, p Problem, retryAfter time.Duration) {
	if len(p.Detail) > MaxProblemDetail {
		cut := MaxProblemDetail
		for cut > 0 && !utf8.RuneStart(p.Detail[cut]) {
			cut--
		}
		p.Detail = p.Detail[:cut] + "..."
	}
	if retryAfter > 0 {
		secs := int((retryAfter + time.Second - 1) / time.Second)
		p.RetryAfter = secs
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	body, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
