package command

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/sideeffect"
)

func newIntents(o *options) *cobra.Command {
	var state string
	var limit int
	c := &cobra.Command{
		Use:   "intents",
		Short: "List side-effect intents; requeue or resolve the ones that need attention",
		Long: `intents lists side-effect intents. An intent parked as needs_attention (too
many attempts without a definite answer from the provider) waits for an
operator: "intents requeue" makes it due again with a fresh attempt budget
(its next attempt asks the provider first), "intents resolve" finishes it
with the verdict the provider's own dashboard gives.

Actions work on a stopped service's file (--db; the service's reconciler
applies them when it runs again) or through a running service's admin
endpoint (--addr with --token).`,
		Example: `  oncekv intents --db payments.db
  oncekv intents --db payments.db --state needs_attention
  oncekv intents requeue --db payments.db 7a45e4ba-f2b9-5af2-9273-3b8eaa7acea9
  oncekv intents resolve --addr http://127.0.0.1:8081 --token "$TOKEN" ID --state failed --reason "declined in the dashboard"`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch state {
			case "", "pending", "unknown", "succeeded", "failed", "needs_attention":
			default:
				return usagef("--state must be pending, unknown, succeeded, failed or needs_attention, not %q", state)
			}
			if limit < 0 {
				return usagef("--limit must be 0 (all) or more, not %d", limit)
			}
			list, err := query(o, func(src inspect.Source) ([]inspect.Intent, error) {
				return src.Intents(cmd.Context(), state, limit)
			})
			if err != nil {
				return err
			}
			return o.emit(list, func(w io.Writer) {
				fmt.Fprintln(w, "ID\tKIND\tSUBJECT\tSTATE\tATTEMPTS\tNEXT ATTEMPT\tLAST ERROR\tPROBLEM")
				for _, in := range list {
					if in.Error != "" {
						fmt.Fprintf(w, "%s\t-\t-\tcorrupt\t-\t-\t-\t%s\n", dash(esc(in.ID)), esc(in.Error))
						continue
					}
					st := in.State
					if in.Resolution != "" {
						st += " (resolving: " + in.Resolution + ")"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t-\n", esc(in.ID), esc(in.Kind), esc(in.Subject), st, in.Attempts, tsp(in.NextAttemptAt), dash(esc(in.LastError)))
				}
				fmt.Fprintf(w, "(%d intents)\n", len(list))
			})
		},
	}
	c.Flags().StringVar(&state, "state", "", "only intents in `STATE`")
	c.Flags().IntVar(&limit, "limit", 0, "at most `N` (0: all from a file; an admin endpoint lists 100 unless asked, 1000 at most)")
	addrFlag(c, o)
	c.AddCommand(newIntentsRequeue(o), newIntentsResolve(o))
	return c
}

// operate runs an action through the admin endpoint (--addr) or on the file
// (--db, opened for writing).
func operate[T any](o *options, act func(op inspect.Operator) (T, error)) (T, error) {
	var zero T
	if o.addr != "" {
		if o.db != "" || o.etcd != "" {
			return zero, usagef("use --db, --etcd or --addr, not two of them")
		}
		return act(o.client())
	}
	db, err := o.open(true)
	if err != nil {
		return zero, err
	}
	defer func() { _ = db.Close() }()
	return act(&inspect.Actions{DB: db})
}

func printAction(o *options, verb string, in inspect.Intent) error {
	return o.emit(in, func(w io.Writer) {
		fmt.Fprintf(w, "%s\t%s (%s %s)\n", verb, in.ID, esc(in.Kind), esc(in.Subject))
		fmt.Fprintf(w, "state\t%s\n", in.State)
		if in.Resolution != "" {
			fmt.Fprintf(w, "resolution\t%s, applied by the service's reconciler on its next pass\n", in.Resolution)
		}
	})
}

func newIntentsRequeue(o *options) *cobra.Command {
	c := &cobra.Command{
		Use:   "requeue ID",
		Short: "Make a parked or unknown intent due again, with a fresh attempt budget",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := operate(o, func(op inspect.Operator) (inspect.Intent, error) { return op.Requeue(cmd.Context(), args[0]) })
			if err != nil {
				return err
			}
			return printAction(o, "requeued", in)
		},
	}
	addrFlag(c, o)
	return c
}

func newIntentsResolve(o *options) *cobra.Command {
	var state, result, reason string
	c := &cobra.Command{
		Use:   "resolve ID --state succeeded|failed --reason TEXT",
		Short: "Finish an intent with the provider's own verdict (its handler's completion runs)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := sideeffect.ParseState(state)
			if err != nil || !st.Final() {
				return usagef("--state must be succeeded or failed, not %q", state)
			}
			if reason == "" {
				return usagef("--reason is required: say who checked what")
			}
			in, err := operate(o, func(op inspect.Operator) (inspect.Intent, error) {
				return op.Resolve(cmd.Context(), args[0], st, []byte(result), reason)
			})
			if err != nil {
				return err
			}
			return printAction(o, "resolved", in)
		},
	}
	c.Flags().StringVar(&state, "state", "", "succeeded or failed")
	c.Flags().StringVar(&result, "result", "", "the provider's result for succeeded (a charge ID)")
	c.Flags().StringVar(&reason, "reason", "", "why: who checked what (kept with the intent)")
	addrFlag(c, o)
	return c
}
