package command

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
)

func TestIntents(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	out, _, code := run("intents", "--db", db)
	require.Equal(t, 0, code)
	require.Contains(t, out, "(3 intents)")
	require.Regexp(t, `charge\s+order/ord_1\s+succeeded\s+1`, out)
	out, _, _ = run("intents", "--db", db, "--state", "needs_attention", "--json")
	var list []inspect.Intent
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list, 1)
	require.Equal(t, "order/ord_2", list[0].Subject)
	require.Contains(t, list[0].LastError, "provider unavailable")
	out, _, _ = run("intents", "--db", db, "--state", "pending")
	require.Contains(t, out, "order/ord_3")
	_, _, code = run("intents", "--db", db, "--state", "bogus")
	require.Equal(t, 2, code)
}
