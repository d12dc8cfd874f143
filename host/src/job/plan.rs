//! The physical plan: which vertices share a thread (chains) and how chains connect.
//!
//! A vertex is chained to its input when it has exactly one input, reads its main output over
//! a `forward` edge, parallelism is equal and the input feeds nothing else (as Flink's
//! operator chaining). So an operator whose side outputs are read always ends its chain.
//! Every chain runs `parallelism` times, one thread per subtask.

use super::spec::{EdgeKind, JobSpec};

/// A sequence of vertices that runs in one thread per subtask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Vertex indices, head first.
    pub vertices: Vec<usize>,
    pub parallelism: u32,
}

impl Chain {
    pub fn head(&self) -> usize {
        self.vertices[0]
    }
}

/// A connection between chains: every upstream subtask has one channel to each downstream
/// subtask it may send to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub from_chain: usize,
    pub to_chain: usize,
    pub edge: EdgeKind,
    /// The side output of the upstream chain's last vertex this connection carries, or its
    /// main output.
    pub side_output: Option<String>,
    /// Which input of the downstream chain's head it feeds (see `spec::Input::index`).
    pub input: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub chains: Vec<Chain>,
    pub connections: Vec<Connection>,
}

impl Plan {
    pub fn new(spec: &JobSpec) -> Plan {
        let n = spec.vertices.len();
        let mut chain_of = vec![usize::MAX; n];
        let mut chains: Vec<Chain> = Vec::new();
        for (v, vertex) in spec.vertices.iter().enumerate() {
            let chained_to = match vertex.inputs.as_slice() {
                [input]
                    if input.edge == EdgeKind::Forward
                        && input.side_output.is_none()
                        && spec.vertices[input.from].parallelism == vertex.parallelism
                        && spec.consumer_count(input.from) == 1 =>
                {
                    Some(chain_of[input.from])
                }
                _ => None,
            };
            match chained_to {
                Some(c) => {
                    chains[c].vertices.push(v);
                    chain_of[v] = c;
                }
                None => {
                    chain_of[v] = chains.len();
                    chains.push(Chain {
                        vertices: vec![v],
                        parallelism: vertex.parallelism,
                    });
                }
            }
        }
        let mut connections = Vec::new();
        for (v, vertex) in spec.vertices.iter().enumerate() {
            if chains[chain_of[v]].head() != v {
                continue;
            }
            for input in &vertex.inputs {
                connections.push(Connection {
                    from_chain: chain_of[input.from],
                    to_chain: chain_of[v],
                    edge: input.edge,
                    side_output: input.side_output.clone(),
                    input: input.index,
                });
            }
        }
        Plan {
            chains,
            connections,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn forward_edges_of_equal_parallelism_chain() {
        let spec = JobSpec::parse(
            "[job]\nparallelism = 2\n\
             [[source]]\nname = \"gen\"\ntype = \"generator\"\ncount = 5\n\
             [[operator]]\nname = \"split\"\nuid = \"s\"\nnative = \"split_words\"\ninput = \"gen\"\n\
             [[operator]]\nname = \"count\"\nuid = \"c\"\nnative = \"count_words\"\ninput = \"split\"\nedge = \"key_by\"\n\
             [[sink]]\nname = \"out\"\ntype = \"print\"\ninput = \"count\"\n\
             [[sink]]\nname = \"raw\"\ntype = \"print\"\ninput = \"split\"\nparallelism = 1\nedge = \"rebalance\"\n",
            Path::new("/"),
            "job",
        )
        .unwrap();
        let plan = Plan::new(&spec);
        let names = |c: &Chain| {
            c.vertices
                .iter()
                .map(|&v| spec.vertices[v].name.as_str())
                .collect::<Vec<_>>()
        };
        let mut chains: Vec<_> = plan.chains.iter().map(names).collect();
        chains.sort();
        // split feeds two consumers, so count and raw start chains of their own.
        assert_eq!(
            chains,
            vec![vec!["count", "out"], vec!["gen", "split"], vec!["raw"]]
        );
        let mut edges: Vec<_> = plan
            .connections
            .iter()
            .map(|c| {
                (
                    names(&plan.chains[c.from_chain])[0],
                    names(&plan.chains[c.to_chain])[0],
                    c.edge,
                )
            })
            .collect();
        edges.sort_by_key(|e| e.1);
        assert_eq!(
            edges,
            vec![
                ("gen", "count", EdgeKind::KeyBy),
                ("gen", "raw", EdgeKind::Rebalance)
            ]
        );
    }
}
