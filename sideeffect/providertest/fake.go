package providertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/oncekv/oncekv/sideeffect"
)

// Fault is what the fake does to one call.
type Fault int

// Faults.
const (
	// None: behave.
	None Fault = iota
	// FailBeforeCharge: return an error without charging (a 503).
	FailBeforeCharge
	// LoseResponse: charge, then return an error as if the response was lost.
	LoseResponse
	// Decline: refuse definitely (a card declined); remembered for the key.
	Decline
	// StatusUnknown: a status call that cannot answer.
	StatusUnknown
)

func (f Fault) String() string {
	return [...]string{"none", "fail_before_charge", "lose_response", "decline", "status_unknown"}[f]
}

// Rates injects faults at random. Each is a probability in [0, 1].
type Rates struct {
	FailBeforeCharge float64
	LoseResponse     float64
	Decline          float64
	StatusUnknown    float64
}

// Charge is one effect the fake performed.
type Charge struct {
	ID            string
	DownstreamKey string
	Subject       string
	Payload       string
}

// CallRecord is one call the fake received.
type CallRecord struct {
	Op            string // "do" or "status"
	DownstreamKey string
	Subject       string
	Fault         Fault
	Outcome       string // "charged", "replayed", "declined", "failed", "lost", "succeeded", "not_found", "unknown"
}

// ErrUnavailable is the error of FailBeforeCharge.
var ErrUnavailable = errors.New("providertest: provider unavailable (nothing charged)")

// ErrLost is the error of LoseResponse.
var ErrLost = errors.New("providertest: connection reset (the charge went through)")

// Fake is an in-memory Provider. It is safe for concurrent use.
type Fake struct {
	mu       sync.Mutex
	charges  map[string]Charge
	declined map[string]string
	log      []CallRecord
	rates    Rates
	rng      *rand.Rand
	// Script, if set, picks the fault for each call ("do" or "status") and
	// overrides Rates.
	Script func(op string, c sideeffect.Call) Fault
}

var _ sideeffect.Provider = (*Fake)(nil)

// New returns a Fake with the given fault rates, seeded for reproducible runs.
func New(rates Rates, seed uint64) *Fake {
	return &Fake{charges: map[string]Charge{}, declined: map[string]string{}, rates: rates, rng: rand.New(rand.NewPCG(seed, seed+1))} //nolint:gosec // fault dice, seeded
}

func (f *Fake) pick(op string, c sideeffect.Call) Fault {
	if f.Script != nil {
		return f.Script(op, c)
	}
	r := f.rng.Float64()
	if op == "status" {
		if r < f.rates.StatusUnknown {
			return StatusUnknown
		}
		return None
	}
	switch {
	case r < f.rates.FailBeforeCharge:
		return FailBeforeCharge
	case r < f.rates.FailBeforeCharge+f.rates.LoseResponse:
		return LoseResponse
	case r < f.rates.FailBeforeCharge+f.rates.LoseResponse+f.rates.Decline:
		return Decline
	}
	return None
}

// Do charges once per downstream key.
func (f *Fake) Do(ctx context.Context, c sideeffect.Call) (sideeffect.Report, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fault := f.pick("do", c)
	rec := CallRecord{Op: "do", DownstreamKey: c.DownstreamKey, Subject: c.Subject, Fault: fault}
	defer func() { f.log = append(f.log, rec) }()
	if ch, ok := f.charges[c.DownstreamKey]; ok {
		rec.Outcome = "replayed"
		return sideeffect.Report{State: sideeffect.Succeeded, Result: []byte(ch.ID)}, nil
	}
	if reason, ok := f.declined[c.DownstreamKey]; ok {
		rec.Outcome = "declined"
		return sideeffect.Report{State: sideeffect.Failed, Reason: reason}, nil
	}
	switch fault {
	case FailBeforeCharge:
		rec.Outcome = "failed"
		return sideeffect.Report{}, ErrUnavailable
	case Decline:
		f.declined[c.DownstreamKey] = "card_declined"
		rec.Outcome = "declined"
		return sideeffect.Report{State: sideeffect.Failed, Reason: "card_declined"}, nil
	}
	ch := Charge{ID: fmt.Sprintf("ch_%04d", len(f.charges)+1), DownstreamKey: c.DownstreamKey, Subject: c.Subject, Payload: string(c.Payload)}
	f.charges[c.DownstreamKey] = ch
	if fault == LoseResponse {
		rec.Outcome = "lost"
		return sideeffect.Report{}, ErrLost
	}
	rec.Outcome = "charged"
	return sideeffect.Report{State: sideeffect.Succeeded, Result: []byte(ch.ID)}, nil
}

// Status answers by key.
func (f *Fake) Status(ctx context.Context, c sideeffect.Call) (sideeffect.Report, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fault := f.pick("status", c)
	rec := CallRecord{Op: "status", DownstreamKey: c.DownstreamKey, Subject: c.Subject, Fault: fault}
	defer func() { f.log = append(f.log, rec) }()
	if fault == StatusUnknown {
		rec.Outcome = "unknown"
		return sideeffect.Report{}, errors.New("providertest: status unavailable")
	}
	if ch, ok := f.charges[c.DownstreamKey]; ok {
		rec.Outcome = "succeeded"
		return sideeffect.Report{State: sideeffect.Succeeded, Result: []byte(ch.ID)}, nil
	}
	if reason, ok := f.declined[c.DownstreamKey]; ok {
		rec.Outcome = "failed"
		return sideeffect.Report{State: sideeffect.Failed, Reason: reason}, nil
	}
	rec.Outcome = "not_found"
	return sideeffect.Report{State: sideeffect.NotFound}, nil
}

// Charges returns every charge, in no particular order.
func (f *Fake) Charges() []Charge {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Charge, 0, len(f.charges))
	for _, c := range f.charges {
		out = append(out, c)
	}
	return out
}

// Log returns every call received, in order.
func (f *Fake) Log() []CallRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]CallRecord(nil), f.log...)
}

// Ops returns the log's "op:outcome" pairs for one downstream key, in order.
func (f *Fake) Ops(key string) []string {
	var out []string
	for _, r := range f.Log() {
		if r.DownstreamKey == key {
			out = append(out, r.Op+":"+r.Outcome)
		}
	}
	return out
}
