// orch's MPI loop's all-reduce as a TensorFlow op: the sum of a float tensor over MPI_COMM_WORLD, inside the graph.
//
// The MPI loop (frameworks/mpi/trainer/mpi_loop.py) calls it once per training step on the flat gradients. Before
// it, the gradients left the graph for mpi4py through tf.numpy_function, which cost 0.16-0.24 ms a step on one
// core beside a 0.28-0.37 ms step (benchmarks/results/mpi_step.md). The op blocks in MPI_Allreduce on one of
// TensorFlow's threads, as mpi4py's blocking call did, and returns the seconds the call took beside the sum: the
// all-reduce with any wait for a rank still computing, measured by each rank.
//
// With ``yielding`` (the loop sets it where the ranks outnumber the cores) the op starts MPI_Iallreduce and gives up
// its core between tests of it (sched_yield), so that a rank sharing the core, which the others wait for, computes;
// MPICH's own blocking wait polls and holds the core.
//
// MPI must be initialised (mpi4py does, with MPI_THREAD_MULTIPLE) before the op first runs; the loop loads the
// library after. Built by the image's deps stage against the lock's TensorFlow and MPICH (see the Dockerfile).
#include <mpi.h>

#include <sched.h>

#include <chrono>
#include <cstdint>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using tensorflow::DEVICE_CPU;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

class OrchMpiAllreduceOp : public OpKernel {
 public:
  explicit OrchMpiAllreduceOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("yielding", &yielding_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& values = context->input(0);
    OP_REQUIRES(context, values.NumElements() <= INT32_MAX,
                tensorflow::errors::InvalidArgument("more values than one MPI_Allreduce takes"));
    Tensor* summed = nullptr;
    Tensor* seconds = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, values.shape(), &summed));
    OP_REQUIRES_OK(context, context->allocate_output(1, TensorShape({}), &seconds));
    const auto began = std::chrono::steady_clock::now();
    const int count = static_cast<int>(values.NumElements());
    int code = MPI_SUCCESS;
    if (yielding_) {
      MPI_Request request;
      code = MPI_Iallreduce(values.flat<float>().data(), summed->flat<float>().data(), count, MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD, &request);
      int done = 0;
      while (code == MPI_SUCCESS && !done) {
        code = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (!done) sched_yield();
      }
    } else {
      code = MPI_Allreduce(values.flat<float>().data(), summed->flat<float>().data(), count, MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD);
    }
    seconds->scalar<double>()() = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    OP_REQUIRES(context, code == MPI_SUCCESS, tensorflow::errors::Internal("MPI_Allreduce failed, code ", code));
  }

 private:
  bool yielding_ = false;
};

}  // namespace

REGISTER_OP("OrchMpiAllreduce")
    .Input("values: float")
    .Output("summed: float")
    .Output("seconds: double")
    .Attr("yielding: bool = false")
    .SetIsStateful()  // a collective: never folded, pruned, merged or reordered
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->Scalar());
      return tensorflow::OkStatus();
    });

REGISTER_KERNEL_BUILDER(Name("OrchMpiAllreduce").Device(DEVICE_CPU), OrchMpiAllreduceOp);
