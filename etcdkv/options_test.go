package etcdkv_test

import (
	"errors"
	"testing"

	"github.com/oncekv/oncekv/etcdkv"
)

// Options that cannot work are refused when the backend is made, with
// ErrInvalidOptions, before anything is sent: negative limits, a
// transaction bound with no room for a transaction, no endpoints, no
// client. The least that works is accepted.
func TestInvalidOptionsAreRefused(t *testing.T) {
	t.Parallel()
	const nowhere = "http://127.0.0.1:1" // never dialled: the options are checked first
	for name, o := range map[string]etcdkv.Options{
		"negative request timeout":   {RequestTimeout: -1},
		"negative attempts":          {MaxAttempts: -1},
		"negative solo after":        {SoloAfter: -1},
		"negative request bytes":     {MaxRequestBytes: -1},
		"negative transaction bound": {MaxTxOps: -1},
		"7 operations a transaction": {MaxTxOps: 7},
	} {
		if _, err := etcdkv.Open(nowhere, &o); !errors.Is(err, etcdkv.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
	}
	for _, endpoints := range []string{"", " , "} {
		if _, err := etcdkv.Open(endpoints, nil); !errors.Is(err, etcdkv.ErrInvalidOptions) {
			t.Errorf("endpoints %q: %v, want ErrInvalidOptions", endpoints, err)
		}
	}
	if _, err := etcdkv.New(nil, nil); !errors.Is(err, etcdkv.ErrInvalidOptions) {
		t.Errorf("no client: %v, want ErrInvalidOptions", err)
	}
	for name, o := range map[string]*etcdkv.Options{"defaults": nil, "8 operations a transaction": {MaxTxOps: 8}} {
		b, err := etcdkv.Open(nowhere, o)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if err := b.Close(); err != nil {
			t.Errorf("%s: close: %v", name, err)
		}
	}
}
