// Added to KAI's snapshot plugin package at build time (an overlay), not part of KAI's source.
// TestExportSnapshot reads the snapshot at $SNAPSHOT_IN into KAI's own types, creates its objects in fake
// clients, lets KAI's scheduler cache list them and writes what KAI's plugin serves to $SNAPSHOT_OUT.

package snapshot

import (
	"archive/zip"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	version "k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"

	kaifake "github.com/kai-scheduler/KAI-scheduler/pkg/apis/client/clientset/versioned/fake"
	"github.com/kai-scheduler/KAI-scheduler/pkg/scheduler/cache"
	"github.com/kai-scheduler/KAI-scheduler/pkg/scheduler/conf"
	"github.com/kai-scheduler/KAI-scheduler/pkg/scheduler/framework"
)

func readInput(t *testing.T, path string) *Snapshot {
	archive, err := zip.OpenReader(path)
	var data []byte
	if err == nil {
		defer archive.Close()
		file, err := archive.Open(SnapshotFileName)
		if err != nil {
			t.Fatal(err)
		}
		if data, err = io.ReadAll(file); err != nil {
			t.Fatal(err)
		}
	} else if data, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	snapshot := &Snapshot{}
	if err := json.Unmarshal(data, snapshot); err != nil {
		t.Fatal(err)
	}
	return snapshot
}

func TestExportSnapshot(t *testing.T) {
	in, out := os.Getenv("SNAPSHOT_IN"), os.Getenv("SNAPSHOT_OUT")
	if in == "" || out == "" {
		t.Skip("SNAPSHOT_IN and SNAPSHOT_OUT name the files")
	}
	snapshot := readInput(t, in)
	raw := snapshot.RawObjects
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	kube := fake.NewSimpleClientset()
	kube.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{Major: "1", Minor: "34"}
	kai := kaifake.NewSimpleClientset()
	create := metav1.CreateOptions{}
	for _, o := range raw.Nodes {
		if _, err := kube.CoreV1().Nodes().Create(ctx, o, create); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range raw.Pods {
		if _, err := kube.CoreV1().Pods(o.Namespace).Create(ctx, o, create); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range raw.ConfigMaps {
		if _, err := kube.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, create); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range raw.PriorityClasses {
		if _, err := kube.SchedulingV1().PriorityClasses().Create(ctx, o, create); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range raw.Queues {
		if _, err := kai.SchedulingV2().Queues("").Create(ctx, o, create); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range raw.PodGroups {
		if _, err := kai.SchedulingV2alpha2().PodGroups(o.Namespace).Create(ctx, o, create); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range raw.BindRequests {
		if _, err := kai.SchedulingV1alpha2().BindRequests(o.Namespace).Create(ctx, o, create); err != nil {
			t.Fatal(err)
		}
	}

	params := *snapshot.SchedulerParams
	if params.PartitionParams == nil {
		params.PartitionParams = &conf.SchedulingNodePoolParams{}
	}
	schedulerCache := cache.New(&cache.SchedulerCacheParams{
		KubeClient: kube, KAISchedulerClient: kai, SchedulerName: params.SchedulerName,
		NodePoolParams: params.PartitionParams, FullHierarchyFairness: true, NumOfStatusRecordingWorkers: 1,
		DiscoveryClient: kube.Discovery(),
	})
	schedulerCache.Run(ctx.Done())
	schedulerCache.WaitForCacheSync(ctx.Done())

	plugin := New(nil)
	plugin.OnSessionOpen(&framework.Session{Config: snapshot.Config, SchedulerParams: params, Cache: schedulerCache})
	recorder := httptest.NewRecorder()
	plugin.(*snapshotPlugin).serveSnapshot(recorder, httptest.NewRequest("GET", "/get-snapshot", nil))
	if recorder.Code != 200 {
		t.Fatalf("get-snapshot answered %d", recorder.Code)
	}
	if err := os.WriteFile(out, recorder.Body.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
