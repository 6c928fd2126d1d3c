package sideeffect

import (
	"context"
	"fmt"
)

// Provider is an outside system that performs side effects (charges,
// emails, third-party API calls) and can be asked what became of one. It
// must honour the downstream key: a second Do with the same key must not
// repeat the effect.
//
// Do and Status must return once their ctx ends (it ends after
// Config.CallTimeout): the executor waits for them, as Go cannot stop a
// call that goes on. One that never returns holds its caller (Perform's
// request) and, in the reconciler, its worker and the pass, so that no
// later pass runs; one that outlives the intent's Lease lets a retry take
// the intent over (ErrStale for the first attempt's result).
type Provider interface {
	// Do performs the call. A Report with State Succeeded or Failed is a
	// definite outcome; an error means the outcome is unknown (the call may
	// or may not have taken effect: a timeout, a dropped connection). So
	// does a panic, which the executor recovers and logs with its stack.
	Do(ctx context.Context, c Call) (Report, error)
	// Status reports what the provider knows about c.DownstreamKey:
	// Succeeded, Failed, NotFound (never received: safe to send again) or
	// Unknown. An error, or a panic, is treated as Unknown.
	Status(ctx context.Context, c Call) (Report, error)
}

// Call is what a Provider is asked to do.
type Call struct {
	IntentID      string
	Kind          string
	Subject       string
	DownstreamKey string
	Payload       []byte
	Attempt       int // 1 for the first attempt
}

// ProviderState is a provider's answer about a downstream key.
type ProviderState int

// Provider states.
const (
	// Unknown: the provider cannot say (yet).
	Unknown ProviderState = iota
	// Succeeded: the effect happened; Report.Result describes it.
	Succeeded
	// Failed: the effect definitely did not happen and will not; Report.Reason says why.
	Failed
	// NotFound: the provider never received the key; sending it is safe.
	NotFound
)

func (s ProviderState) String() string {
	switch s {
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case NotFound:
		return "not_found"
	}
	return "unknown"
}

// Report is a provider's answer.
type Report struct {
	State  ProviderState
	Result []byte // on Succeeded: what the provider returned (a charge ID, a receipt)
	Reason string // on Failed or Unknown: why
}

// ProviderFunc adapts two functions to a Provider.
type ProviderFunc struct {
	DoFunc     func(ctx context.Context, c Call) (Report, error)
	StatusFunc func(ctx context.Context, c Call) (Report, error)
}

var _ Provider = ProviderFunc{}

// Do calls DoFunc.
func (p ProviderFunc) Do(ctx context.Context, c Call) (Report, error) { return p.DoFunc(ctx, c) }

// Status calls StatusFunc.
func (p ProviderFunc) Status(ctx context.Context, c Call) (Report, error) {
	if p.StatusFunc == nil {
		return Report{}, fmt.Errorf("sideeffect: provider for %s has no status call", c.Kind)
	}
	return p.StatusFunc(ctx, c)
}
