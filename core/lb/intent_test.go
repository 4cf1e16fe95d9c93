package lb

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
)

func TestShutdownIntent(t *testing.T) {
	tests := []struct {
		name  string
		self  *model.Node
		known bool
		want  Intent
	}{{
		name:  "a ready node: a restart",
		self:  &model.Node{Name: "n", Ready: true},
		known: true,
		want:  Intent{Restart: true, Reason: "the Node is neither deleted, cordoned nor shutting down"},
	}, {
		name:  "not ready (the kubelet is away for another reason): a restart",
		self:  &model.Node{Name: "n"},
		known: true,
		want:  Intent{Restart: true, Reason: "the Node is neither deleted, cordoned nor shutting down"},
	}, {
		name: "never reported: a restart",
		want: Intent{Restart: true, Reason: "the watch has not reported this node; assuming a restart"},
	}, {
		name:  "deleted since",
		known: true,
		want:  Intent{Reason: "the Node was deleted"},
	}, {
		name:  "being deleted",
		self:  &model.Node{Name: "n", Ready: true, Deleting: true},
		known: true,
		want:  Intent{Reason: "the Node is being deleted (deletionTimestamp or ToBeDeletedByClusterAutoscaler taint)"},
	}, {
		name:  "cordoned",
		self:  &model.Node{Name: "n", Ready: true, Unschedulable: true},
		known: true,
		want:  Intent{Reason: "the Node is cordoned (unschedulable, as kubectl drain leaves it)"},
	}, {
		name:  "shutting down",
		self:  &model.Node{Name: "n", ShuttingDown: true},
		known: true,
		want:  Intent{Reason: "the node is shutting down (the kubelet's graceful node shutdown, or the out-of-service taint)"},
	}, {
		name:  "being deleted and cordoned: deletion named first",
		self:  &model.Node{Name: "n", Deleting: true, Unschedulable: true, ShuttingDown: true},
		known: true,
		want:  Intent{Reason: "the Node is being deleted (deletionTimestamp or ToBeDeletedByClusterAutoscaler taint)"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ShutdownIntent(tt.self, tt.known)); diff != "" {
				t.Errorf("ShutdownIntent (-want +got):\n%s", diff)
			}
		})
	}
}
