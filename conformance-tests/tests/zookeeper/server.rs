//! The ZooKeeper server the tests use lives in the library's server specs.

pub use conformance_tests::server::specs::{zookeeper_serving as wait_serving, ZOOKEEPER};
