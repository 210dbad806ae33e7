package main

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// strictDecode reads the YAML file path into v, refusing a field v's type
// does not have (a misspelt or misplaced one, which the API server would
// drop or refuse).
func strictDecode(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.ToJSON(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestAutoscaleManifests checks deploy/autoscale: the HPA decodes strictly
// into autoscaling/v2's types, scales the Deployment of
// deploy/20-deployment.yaml on sharding_desired_replicas (an AverageValue
// of 1: the count itself) up to the example's shards; the ScaledObject
// scales the same Deployment on the same metric with the same bounds and
// the same behaviour (decoded strictly into autoscaling/v2's). The server
// validates both (integration/autoscale_test.go), and the simulated
// autoscaler reads hpa.yaml's behaviour (sharding/sim_autoscale_test.go).
func TestAutoscaleManifests(t *testing.T) {
	var d appsv1.Deployment
	strictDecode(t, "deploy/20-deployment.yaml", &d)
	var h autoscalingv2.HorizontalPodAutoscaler
	strictDecode(t, "deploy/autoscale/hpa.yaml", &h)
	ref := h.Spec.ScaleTargetRef
	if h.APIVersion != "autoscaling/v2" || h.Kind != "HorizontalPodAutoscaler" || h.Namespace != d.Namespace ||
		ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != d.Name {
		t.Errorf("hpa.yaml: %s %s in %q scales %+v, want the Deployment %s/%s", h.APIVersion, h.Kind, h.Namespace, ref, d.Namespace, d.Name)
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || h.Spec.MaxReplicas != shards {
		t.Errorf("hpa.yaml: replicas from %v to %d, want from 2 or more to the shards, %d", h.Spec.MinReplicas, h.Spec.MaxReplicas, shards)
	}
	if len(h.Spec.Metrics) != 1 || h.Spec.Metrics[0].External == nil ||
		h.Spec.Metrics[0].External.Metric.Name != "sharding_desired_replicas" ||
		h.Spec.Metrics[0].External.Target.Type != autoscalingv2.AverageValueMetricType ||
		h.Spec.Metrics[0].External.Target.AverageValue == nil || h.Spec.Metrics[0].External.Target.AverageValue.String() != "1" {
		t.Errorf("hpa.yaml: metrics %+v, want the External sharding_desired_replicas at an AverageValue of 1", h.Spec.Metrics)
	}
	b := h.Spec.Behavior
	if b == nil || b.ScaleDown == nil || b.ScaleDown.StabilizationWindowSeconds == nil || *b.ScaleDown.StabilizationWindowSeconds < 60 {
		t.Fatalf("hpa.yaml: behavior %+v, want a scale-down stabilisation window", b)
	}

	// The ScaledObject: no Go types without KEDA's module, so its shape is
	// checked here and its schema by the server (integration/).
	var so struct {
		APIVersion, Kind string
		Metadata         struct{ Name, Namespace string }
		Spec             struct {
			ScaleTargetRef                   struct{ APIVersion, Kind, Name string }
			PollingInterval                  int
			MinReplicaCount, MaxReplicaCount int32
			Advanced                         struct {
				HorizontalPodAutoscalerConfig struct {
					Behavior json.RawMessage
				}
			}
			Triggers []struct {
				Type, MetricType string
				Metadata         map[string]string
			}
		}
	}
	b2, err := os.ReadFile("deploy/autoscale/keda.yaml")
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.ToJSON(b2)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &so); err != nil {
		t.Fatal(err)
	}
	var kb autoscalingv2.HorizontalPodAutoscalerBehavior
	dec := json.NewDecoder(bytes.NewReader(so.Spec.Advanced.HorizontalPodAutoscalerConfig.Behavior))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&kb); err != nil {
		t.Fatalf("keda.yaml: behavior: %v", err)
	}
	if !reflect.DeepEqual(&kb, b) {
		t.Errorf("keda.yaml: behavior %+v, want hpa.yaml's %+v", kb, *b)
	}
	st := so.Spec.ScaleTargetRef
	if so.APIVersion != "keda.sh/v1alpha1" || so.Kind != "ScaledObject" || so.Metadata.Namespace != d.Namespace ||
		st.Kind != "Deployment" || st.Name != d.Name || so.Spec.PollingInterval != 15 ||
		so.Spec.MinReplicaCount != *h.Spec.MinReplicas || so.Spec.MaxReplicaCount != h.Spec.MaxReplicas {
		t.Errorf("keda.yaml: %+v, want the Deployment %s/%s between hpa.yaml's bounds, polled every 15 s", so, d.Namespace, d.Name)
	}
	if len(so.Spec.Triggers) != 1 {
		t.Fatalf("keda.yaml: %d triggers, want 1", len(so.Spec.Triggers))
	}
	tr := so.Spec.Triggers[0]
	if tr.Type != "prometheus" || tr.MetricType != "AverageValue" || tr.Metadata["threshold"] != "1" ||
		!strings.HasPrefix(tr.Metadata["query"], "max(sharding_desired_replicas{") {
		t.Errorf("keda.yaml: trigger %+v, want prometheus on max(sharding_desired_replicas{...}) at an AverageValue of 1", tr)
	}
}
