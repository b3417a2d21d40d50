// The NCCL communicator (issue 6): see comm/nccl_comm.h once it lands.
