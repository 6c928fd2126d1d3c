package ledger_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/ledger"
)

func TestScope(t *testing.T) {
	t.Parallel()
	s, err := ledger.Scope("acme", "POST", "/v1/orders")
	require.NoError(t, err)
	require.Equal(t, "acme|POST /v1/orders", s)
	for _, tenant := range []string{"", "a|b", "a\x00", "a\nb"} {
		_, err := ledger.Scope(tenant, "POST", "/v1/orders")
		require.ErrorIs(t, err, ledger.ErrInvalidScope, "%q", tenant)
	}
}

// FuzzCanonicalise: never panics; accepts only what encoding/json accepts;
// accepts all valid UTF-8 JSON within the depth bound and without repeated
