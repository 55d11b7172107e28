"""Running workers: threads, typed messages, long-lived tasks, rounds, weights, shared memory, Dask.

The machinery the parallel schemes share, so that each scheme module reads as its
algorithm. Nothing here imports :mod:`dqnlab.schemes`:

* :mod:`~dqnlab.parallel.threads` -- torch threads per process, Ctrl-C in workers;
* :mod:`~dqnlab.parallel.faults` -- the injected-fault test hook;
* :mod:`~dqnlab.parallel.messages` -- the typed messages between the parent and its workers;
* :mod:`~dqnlab.parallel.supervision` -- every worker's hello, heartbeats and end; a lost worker
  detected and named once (which worker, its pid and host, why), for every kind of worker;
* :mod:`~dqnlab.parallel.tasks` -- long-lived worker tasks (:class:`~dqnlab.parallel.tasks.TaskGroup`)
  and the parent's event loop (:func:`~dqnlab.parallel.tasks.drive_tasks`);
* :mod:`~dqnlab.parallel.workers` -- a learner in a long-lived task: its reports, checkpoint
  state and end (worker side), and what the parent knows of it (parent side), once;
* :mod:`~dqnlab.parallel.actor` and :mod:`~dqnlab.parallel.feed` -- Ape-X's actors, and the learner's end of them;
* :mod:`~dqnlab.parallel.rounds` -- synchronous rounds (``sharded``, ``averaged``) over one of two channels,
  :mod:`~dqnlab.parallel.comm`: a joblib round (:mod:`~dqnlab.parallel.joblib_round`) or the all-reduce
  (:mod:`~dqnlab.parallel.parts`, :mod:`~dqnlab.parallel.addresses`, :mod:`~dqnlab.parallel.collectives`,
  :mod:`~dqnlab.parallel.replica`, and rank 0's driver :mod:`~dqnlab.parallel.allreduce`);
* :mod:`~dqnlab.parallel.weights` -- weight averaging, divergence, optimiser-state packing;
* :mod:`~dqnlab.parallel.shm` -- shared memory (``shared``);
* :mod:`~dqnlab.parallel.dask` -- the Dask backend; :mod:`~dqnlab.parallel.procwatch` -- process deaths.

References
----------
* Parameter averaging / local SGD: Zinkevich, Weimer, Smola and Li, "Parallelized
  Stochastic Gradient Descent", NeurIPS 2010; McMahan et al., "Communication-Efficient
  Learning of Deep Networks from Decentralized Data" (FedAvg), AISTATS 2017.
* Many learners sharing parameters: Nair et al., "Massively Parallel Methods for Deep
  Reinforcement Learning" (Gorila), arXiv:1507.04296, 2015.
"""
