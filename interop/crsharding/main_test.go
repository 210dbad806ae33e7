package crsharding

import (
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	// controller-runtime complains, with a stack, about a logger never
	// set; the tests read what they need from their own records.
	log.SetLogger(logr.Discard())
	goleak.VerifyTestMain(m)
}
