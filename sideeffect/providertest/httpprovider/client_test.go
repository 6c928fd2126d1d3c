package httpprovider

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/sideeffect"
)

// 408, 409, 425 and 429 say "not now", not "declined" (issue 13, item 15):
// the outcome is unknown and the intent is retried after asking first.
func TestClientStatusClassification(t *testing.T) {
	cases := map[int]sideeffect.ProviderState{
		200: sideeffect.Succeeded, 201: sideeffect.Succeeded,
		400: sideeffect.Failed, 402: sideeffect.Failed, 422: sideeffect.Failed,
		408: sideeffect.Unknown, 409: sideeffect.Unknown, 425: sideeffect.Unknown, 429: sideeffect.Unknown,
		500: sideeffect.Unknown, 503: sideeffect.Unknown,
	}
	for code, want := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(code)
			fmt.Fprint(w, `{"id":"ch_1"}`)
		}))
		c := &Client{BaseURL: srv.URL, HTTP: srv.Client()}
		rep, err := c.Do(context.Background(), sideeffect.Call{DownstreamKey: "k"})
		srv.Close()
		if want == sideeffect.Unknown {
			require.Error(t, err, "%d is an unknown outcome", code)
			continue
		}
		require.NoError(t, err, code)
		require.Equal(t, want, rep.State, code)
	}
}
