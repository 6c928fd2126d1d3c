package ledger_test

import (
	"strings"
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
	// A scope's tenant may not be empty: usage and quotas are per tenant.
	require.ErrorIs(t, ledger.ValidateScope("|POST /v1/orders"), ledger.ErrInvalidScope)
	require.NoError(t, ledger.ValidateScope("plain"), "a scope without '|' is its own tenant")
	// A refused tenant is quoted in the error, up to 64 bytes of it.
	long := strings.Repeat("t", 63) + "|"
	_, err = ledger.Scope(long, "POST", "/v1/orders")
	require.ErrorContains(t, err, `tenant "`+long+`" contains '|'`, "a 64-byte tenant is quoted whole")
	_, err = ledger.Scope(long+"x", "POST", "/v1/orders")
	require.ErrorContains(t, err, `tenant "`+long+`..." contains '|'`, "a longer one is clipped")
	// The tenant is what precedes the first '|', empty included; a scope
	// without one is its own tenant.
	for scope, tenant := range map[string]string{"acme|POST /x": "acme", "a|b|c": "a", "|POST /x": "", "plain": "plain"} {
		require.Equal(t, tenant, ledger.TenantOf(scope), "%q", scope)
	}
}

// FuzzCanonicalise: never panics; accepts only what encoding/json accepts;
// accepts all valid UTF-8 JSON within the depth bound and without repeated
