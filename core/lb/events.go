package lb

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/switchyard-lb/switchyard/core/model"
)

// announceEvents records the announcers' AnnounceFailed Events on
// Services, through client-go's EventRecorder (whose correlator also
// aggregates repeats and bounds each Service's Event rate).
//
// Events only, no Service condition: with BGP every eligible node
// announces an address, so a per-Service "Announced" condition would be
// written by many nodes, each overwriting the others' view.
type announceEvents struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
}

func newAnnounceEvents(client kubernetes.Interface, nodeName string) *announceEvents {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &announceEvents{
		broadcaster: b,
		recorder:    b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "switchyard", Host: nodeName}),
	}
}

// Event implements report.Recorder.
func (e *announceEvents) Event(svc model.ServiceKey, reason, message string) {
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: svc.Namespace, Name: svc.Name}
	e.recorder.Event(ref, corev1.EventTypeWarning, reason, message)
}

func (e *announceEvents) close() error {
	e.broadcaster.Shutdown()
	return nil
}
