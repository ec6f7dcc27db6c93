package main

import (
	"github.com/fero-go/fero/internal/chaos"
	"github.com/fero-go/fero/internal/chaos/check"
)

// runCheck runs the checkers on one run's directory, in the runner's
// terms.
func runCheck(dir string) (chaos.Verdict, error) {
	rep, err := check.Run(dir)
	if err != nil {
		return chaos.Verdict{}, err
	}
	v := chaos.Verdict{Ops: rep.Ops, Text: rep.String()}
	for _, a := range rep.Anomalies {
		v.Anomalies = append(v.Anomalies, chaos.Anomaly{Kind: a.Kind, Key: a.Key, Message: a.Msg, Slice: a.Slice})
	}
	return v, nil
}
