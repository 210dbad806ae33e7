package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The story stops its informers (factory.Shutdown waits for them) and its
// workers before it returns, so no goroutine is left to ignore.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestDeploymentStory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	res, err := Story(ctx, &out)
	t.Log("\n" + out.String())
	require.NoError(t, err)

	require.True(t, res.Converged(), "every Deployment converged")
	require.Len(t, res.Deployments, len(deployments))
	for i, d := range res.Deployments {
		rs := res.ReplicaSets[i]
		require.EqualValues(t, finalReplicas, *rs.Spec.Replicas, "ReplicaSet %s is at %d", rs.Name, finalReplicas)
		require.Equal(t, d.Generation, d.Status.ObservedGeneration, "status of %s reflects its last generation", d.Name)
		require.EqualValues(t, 1+finalReplicas-1, d.Generation, "%s: one generation for the create and one per spec update", d.Name)
		require.EqualValues(t, finalReplicas, d.Status.Replicas)
		require.Len(t, rs.OwnerReferences, 1)
		require.Equal(t, d.Name, rs.OwnerReferences[0].Name, "the ReplicaSet is owned by its Deployment")
	}
	require.Zero(t, res.Overlaps, "no key was synced by two workers at once")
	require.Less(t, res.Syncs, res.Events, "the queue coalesced events: fewer syncs than events")
	require.Contains(t, out.String(), "no key was synced by two workers at once")
}

// With a debug address the story serves the work queue's debug page while
// it runs, and shuts the server down before it returns (goleak checks).
func TestDebugPage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var page, pageJSON string
	var fetchErr error
	fetch := func(url string) string {
		resp, err := http.Get(url)
		if err != nil {
			fetchErr = err
			return ""
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			fetchErr = err
		}
		return string(b)
	}
	res, err := StoryWithOptions(ctx, io.Discard, Options{
		DebugAddr: "127.0.0.1:0",
		OnServe: func(url string) {
			page = fetch(url + "/debug/workqueue")
			pageJSON = fetch(url + "/debug/workqueue?format=json")
		},
	})
	require.NoError(t, err)
	require.True(t, res.Converged())
	require.NoError(t, fetchErr, "the debug page is served")
	require.Contains(t, page, "<h2>deployments</h2>", "the page shows the controller's queue")
	require.Contains(t, pageJSON, `"name": "deployments"`)
	require.Contains(t, pageJSON, `"rateLimited": true`)
}
