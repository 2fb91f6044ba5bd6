/* none.c — keeps the codegen_cuda layer a library in builds without NVRTC
 * (SHARDC_CUDA off): the CUDA emitter's files are then left out and
 * callers see SHARDC_HAVE_CUDA = 0. */
typedef int sc_cuda_layer_placeholder;
