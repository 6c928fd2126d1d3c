package sideeffect_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/sideeffect"
)

// DownstreamKey joined its fields with NUL without escaping NUL, so two
// different intents could share a provider key (issue 13, item 7).
func TestDownstreamKeyIsInjective(t *testing.T) {
	t.Parallel()
	seen := map[string][3]string{}
	for _, f := range [][3]string{
		{"a\x00b", "c", "p"}, {"a", "b\x00c", "p"}, {"a", "b", "c\x00p"}, {"a\x00b\x00c", "", "p"},
		{"a\x01", "b", "p"}, {"a", "\x01b", "p"}, {"a\x01\x01", "b", "p"}, {"a\x00", "b", "p"},
		{"", "", ""}, {"\x00", "", ""}, {"", "\x00", ""}, {"\x01\x01", "", ""}, {"\x00\x01", "", ""},
	} {
		k := sideeffect.DownstreamKey(f[0], f[1], f[2])
		if other, dup := seen[k]; dup {
			t.Fatalf("%q and %q share the key %s", f, other, k)
		}
		seen[k] = f
	}
	// Fields without NUL or 0x01 keep the keys intents were stored under.
	old := uuid.NewSHA1(uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/oncekv/oncekv/downstream-key")),
		[]byte("acme|POST /v1/orders/{id}/pay\x00pay-1\x00charge")).String()
	require.Equal(t, old, sideeffect.DownstreamKey("acme|POST /v1/orders/{id}/pay", "pay-1", "charge"))
	require.Equal(t, "f727e77e-77db-5acf-a89d-8902ac7f0df8", sideeffect.DownstreamKey("acme|POST /v1/orders/{id}/pay", "pay-1042", "charge"))

	ns := sideeffect.KeyNamespace()
	ns[0] ^= 0xff // a copy: the namespace itself cannot be changed
	require.NotEqual(t, ns, sideeffect.KeyNamespace())
}

// ParseState reads back every name State.String prints (the CLI's and the
// console's state filters), and refuses anything else by naming the
// states it knows.
func TestParseStateReadsWhatStringPrints(t *testing.T) {
	t.Parallel()
	states := []sideeffect.State{sideeffect.StatePending, sideeffect.StateUnknown, sideeffect.StateSucceeded, sideeffect.StateFailed, sideeffect.StateNeedsAttention}
	names := map[string]bool{}
	for _, st := range states {
		got, err := sideeffect.ParseState(st.String())
		require.NoError(t, err)
		require.Equal(t, st, got)
		names[st.String()] = true
	}
	require.Len(t, names, len(states), "every state has a name of its own")
	for _, bad := range []string{"", "Pending", "state(0)", "state(6)", "needs-attention"} {
		_, err := sideeffect.ParseState(bad)
		require.ErrorContains(t, err, "want pending, unknown, succeeded, failed or needs_attention", "%q", bad)
	}
}
