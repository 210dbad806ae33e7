package workqueue

// RaceBuild exposes raceBuild (delay_test.go) to the tests of package
// workqueue_test, so both packages size their largest tests the same way.
var RaceBuild = raceBuild
