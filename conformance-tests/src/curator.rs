//! Apache Curator from Debian's libcurator-recipes-java (and the JDK of
//! openjdk-17-jdk-headless), for the interop checks and the benchmark's ZooKeeper peer:
//! a Java source file run with `java -cp <classpath> File.java`.

/// The jars Curator's recipes run with: the recipes and what they depend on.
const JARS: &[&str] = &[
    "curator-recipes",
    "curator-framework",
    "curator-client",
    "zookeeper",
    "zookeeper-jute",
    "guava",
    "slf4j-api",
    "slf4j-nop",
];

/// The `-cp` argument that runs Curator's recipes from Debian's jars.
pub fn classpath() -> String {
    JARS.iter()
        .map(|jar| format!("/usr/share/java/{jar}.jar"))
        .collect::<Vec<_>>()
        .join(":")
}

/// What to install when `java` or the jars are missing.
pub const INSTALL_HINT: &str = "apt-get install openjdk-17-jdk-headless libcurator-recipes-java";
